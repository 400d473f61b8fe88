"""The pipeline's stages. Each registers itself (`Stage.order`); `pipeline.registry` imports every module here."""
