"""The moto S3 server the object-storage tests use serves pyarrow's own S3 client through the AWS environment."""

import pyarrow.fs as pafs


def test_s3_server_serves_pyarrow(s3_server, tmp_path):
    s3_server.create_bucket("bkt")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.txt").write_text("hello")
    assert s3_server.upload_tree(tmp_path / "d", "bkt", "p") == ["p/x.txt"]
    fs, path = pafs.FileSystem.from_uri("s3://bkt/p/x.txt")
    assert fs.open_input_stream(path).read() == b"hello"
    s3_server.stop()  # an outage: the client's next call fails
    try:
        fs.get_file_info("bkt/p/x.txt")
        raise AssertionError("a stopped server answered")
    except OSError:
        pass
