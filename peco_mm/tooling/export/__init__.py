"""Export PeCoViT weights to timm and Hugging Face transformers: the inverse of `convert`.

A PeCo pretraining run, a fine-tuned classifier (mmpretrain `ImageClassifier`) or a dense run's
backbone (mmseg / mmdet, `backbone.*`) is read through the one conversion path
(`peco_mm.checkpoint.convert_checkpoint`), then written in the naming of

- timm's `Beit` (q/v biases, layer scale `gamma_1/2`, shared `rel_pos_bias.*` or per-block
  `blocks.{i}.attn.relative_position_bias_table`, `fc_norm` after mean pooling, `head`), or
  timm's `VisionTransformer` for a ViT without relative positions and with a full qkv bias
  (MAE / PeCo_MAE style: `attn.qkv.bias`, `ls1/ls2.gamma`);
- transformers' BEiT (`BeitModel`, `BeitForImageClassification`,
  `BeitForMaskedImageModeling`; `HF_BEIT_NAMES` in `convert`, read backwards).

Each export is a folder: `model.safetensors`, `config.json` (timm's hub layout, loaded by
`timm.create_model('local-dir:DST', pretrained=True)`; or a transformers `BeitConfig`), a model
card `README.md` generated from the run, and for transformers `preprocessor_config.json`
normalising as the run did. Nothing read from a checkpoint is executed: the config text that
mmengine stores in `meta.cfg` is read as literals only (`read_config_text`).

What cannot be carried is said, not hidden: the masked-image-modeling head has no place in
timm; a key bias of a full qkv bias is dropped for BEiT targets (it adds the same value to
every logit of a query's softmax, so the outputs are unchanged); a backbone without any final
norm gets an identity-initialised pooling norm where the target class needs one.

The package, by step: `source` (what an export is read from), `preprocessing` (the run's test-time
resize, crop and normalisation), `to_timm` and `to_hf` (the weights in each target's names),
`card` (config.json, image processor, model card, writing).
"""
from .card import image_processor, model_card, write_export
from .preprocessing import data_config, read_preprocessing
from .source import (CITATION_BIBTEX, KINDS, TARGETS, Export, ExportSource, describe,
                     read_config_text, read_export_source, read_run)
from .to_hf import to_hf
from .to_timm import timm_file_call, to_timm

__all__ = ['CITATION_BIBTEX', 'KINDS', 'TARGETS', 'Export', 'ExportSource', 'data_config',
           'describe', 'image_processor', 'model_card', 'read_config_text',
           'read_export_source', 'read_preprocessing', 'read_run', 'timm_file_call', 'to_hf',
           'to_timm', 'write_export']
