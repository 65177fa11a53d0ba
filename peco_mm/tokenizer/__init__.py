"""The PeCo tokenizer: VQ-VAE encoder/decoder, perceptual loss, discriminator, model.

By job: `preprocessor` (images -> [-1, 1]), `encoding` (the encoder / decoder pair and the
encode path both tokenizers share), `tokenizer` (`PeCoTokenizer`, training), `frozen`
(`FrozenPeCoTokenizer`, the target generator, and a checkpoint's architecture), the parts
(`cnn`, `vit_codec`, `perceptual`, `discriminator`, `codeword_loss`), and `dalle` (BEiT's
DALL-E behind the same interface)."""
from .cnn import CNNDecoder, CNNEncoder
from .codeword_backbone import CodewordPoolBackbone
from .dalle import DalleDecoder, DalleTokenizer
from .discriminator import PatchDiscriminator
from .perceptual import PerceptualLoss
from .frozen import FrozenPeCoTokenizer
from .preprocessor import TOKENIZER_MEAN, TOKENIZER_STD, TokenizerDataPreprocessor
from .tokenizer import PeCoTokenizer, load_tokenizer_state

__all__ = ['CNNDecoder', 'CNNEncoder', 'CodewordPoolBackbone', 'DalleDecoder',
           'DalleTokenizer', 'FrozenPeCoTokenizer',
           'PatchDiscriminator', 'PeCoTokenizer', 'PerceptualLoss',
           'TOKENIZER_MEAN', 'TOKENIZER_STD',
           'TokenizerDataPreprocessor', 'load_tokenizer_state']
