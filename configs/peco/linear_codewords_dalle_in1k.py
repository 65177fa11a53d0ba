"""Table 4, DALL-E's row (probe 6.1 in the paper): linear_codewords_in1k.py's codeword linear
probe on DALL-E's codes (BEiT's tokenizer) instead of a PeCo tokenizer's.

DALL-E has no separate codebook. A code's vector here is its decoder's embedding of it (the
1x1 conv `blocks.input` on the one-hot code, 128 wide), the input of everything that draws
the code; the paper does not say which vector it took (peco_mm/tokenizer/dalle.py). The
images are the probe's 224 px crops, coded 8x down (28 x 28 codes), in [-1, 1] as for PeCo:
the tokenizer maps them to DALL-E's input range itself.

    tools/dist_train.sh configs/peco/linear_codewords_dalle_in1k.py 8

with DALL-E's weights at the paths below: the encoder as the BEiT config reads it (OpenMMLab's
dalle_encoder.pth; OpenAI's encoder.pkl also reads), the decoder as OpenAI ships it
(decoder.pkl, a pickled module, read without running it). Nothing is downloaded.
"""
_base_ = './linear_codewords_in1k.py'
embed_dims = 128  # DALL-E's code embedding
model = dict(
    backbone=dict(_delete_=True, type='CodewordPoolBackbone',
                  tokenizer=dict(type='DalleTokenizer',
                                 encoder='checkpoints/dalle_encoder.pth',
                                 decoder='checkpoints/dalle_decoder.pkl')),
    neck=dict(input_features=embed_dims),
    head=dict(in_channels=embed_dims))
