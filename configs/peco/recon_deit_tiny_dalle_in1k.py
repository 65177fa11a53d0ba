"""Table 4, DALL-E's row (18.2 top-1 in the paper): recon_deit_tiny_in1k.py's frozen DeiT-T
classifying DALL-E's reconstructions (encode 8x down, decode with its decoder) of the
ImageNet-1K val images, instead of a PeCo tokenizer's.

    python tools/test.py configs/peco/recon_deit_tiny_dalle_in1k.py DEIT_TINY.pth

with DALL-E's weights at the paths below: the encoder as the BEiT config reads it (OpenMMLab's
dalle_encoder.pth; OpenAI's encoder.pkl also reads), the decoder as OpenAI ships it
(decoder.pkl, a pickled module, read without running it). Reconstructions are rounded to
8-bit pixels, as for PeCo's rows.
"""
_base_ = './recon_deit_tiny_in1k.py'
model = dict(backbone=dict(tokenizer=dict(_delete_=True, type='DalleTokenizer',
                                          encoder='checkpoints/dalle_encoder.pth',
                                          decoder='checkpoints/dalle_decoder.pkl')))
