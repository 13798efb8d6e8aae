"""Small standard-architecture models for the Edge TPU mapping tests: defined in the repository's
shared ``testing_models.py`` (the benchmark uses them too), re-exported here for the tests."""

from __future__ import annotations

from testing_models import mobilenet_v2_like, random_batchnorm_stats, resnet_like, transformer_encoder_like

__all__ = ["mobilenet_v2_like", "random_batchnorm_stats", "resnet_like", "transformer_encoder_like"]
