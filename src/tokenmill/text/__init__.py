"""The text algorithms: pure functions over strings, Arrow arrays and their scores; no stage, Ray or I/O import."""
