"""The PeCo tokenizer: VQ-VAE encoder/decoder, perceptual loss, discriminator, model.

By job: `preprocessor` (images -> [-1, 1]), `encoding` (the encoder / decoder pair and the
encode path both tokenizers share), `tokenizer` (`PeCoTokenizer`, training), `frozen`
(`FrozenPeCoTokenizer`, the target generator, and a checkpoint's architecture), the
registered parts a config names (`cnn`, `vit_codec`, `perceptual`, `discriminator`; the
quantizer is `layers.quantizer`'s), `codeword_loss`, `legacy` (the flat arguments of files
written before parts) and `dalle` (BEiT's DALL-E behind the same interface)."""
from .cnn import CNNDecoder, CNNEncoder, cnn_parts
from .codeword_backbone import CodewordPoolBackbone
from .dalle import DalleDecoder, DalleTokenizer
from .discriminator import PatchDiscriminator
from .perceptual import PerceptualLoss
from .frozen import FrozenPeCoTokenizer
from .preprocessor import TOKENIZER_MEAN, TOKENIZER_STD, TokenizerDataPreprocessor
from .tokenizer import PeCoTokenizer, load_tokenizer_state
from .vit_codec import ViTDecoder, ViTEncoder

__all__ = ['CNNDecoder', 'CNNEncoder', 'CodewordPoolBackbone', 'DalleDecoder',
           'DalleTokenizer', 'FrozenPeCoTokenizer',
           'PatchDiscriminator', 'PeCoTokenizer', 'PerceptualLoss',
           'TOKENIZER_MEAN', 'TOKENIZER_STD',
           'TokenizerDataPreprocessor', 'ViTDecoder', 'ViTEncoder', 'cnn_parts',
           'load_tokenizer_state']
