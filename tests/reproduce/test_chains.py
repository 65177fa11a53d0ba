"""Every row of docs/reproduce.md's table, run as its chain of commands at toy size.

Each link is the row's shipped config (configs/peco/*.py) run the way `tools/train.py` /
`tools/test.py` run it (`peco_mm.supervisor.launch.run`, here in-process), with `--cfg-options`
that shrink it: every width divided, 64 px images, one iteration, the shipped pipelines with
their sizes scaled, and the folders and checkpoints this test writes. What makes the row's
config differ from its siblings (a loss weight, a perceptual network, a decoder width, a
mask generator, a backbone setting) is kept. A link's checkpoint feeds the next link, as the
row's commands say: MoCo v3 -> convert_checkpoint -> tokenizer -> pretraining -> fine-tuning,
UperNet, Mask R-CNN, TimeSformer, and the tools of Table 4, Fig. 1, Fig. 3-4 and Table 11.
DALL-E's side (BEiT's codes, Table 4's DALL-E row, Fig. 1's DALL-E distance, Fig. 4's BEiT
predictions) reads a random tiny DALL-E whose decoder is pickled as OpenAI ships it.

The links run once for the module (the `chains` fixture, about 80 s on 2 cores); each row's
test then checks what its links left behind. A row added to the table without a chain here,
or a config the row names that its chain does not run, fails the first test."""
import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config

from tests.conftest import ROOT, load_tool, mmengine_instances_dropped, run_log, scalars

PECO = ROOT / 'configs' / 'peco'
IMG = 64  # toy image side; the paper's 224 (and every size in a pipeline) scales by IMG / 224
ITERS = 1
TINY_ARCH = dict(embed_dims=64, num_layers=4, num_heads=4)  # PeCoViT's; MLP ratio 4
SIZE_KEYS = ('scale', 'size', 'crop_size', 'second_size', 'scale_range')


# ---- shrinking a shipped config --------------------------------------------------------------
def scaled(value, f: float):
    """Sizes in a pipeline step (an int, a tuple of them, -1 kept) times f, at least 8 px."""
    if isinstance(value, (list, tuple)):
        return type(value)(scaled(v, f) for v in value)
    if isinstance(value, int) and value > 0:
        return max(8, int(round(value * f)))
    return value


def scaled_pipeline(pipeline, f: float, grid: int | None = None) -> list:
    """The shipped pipeline with its sizes times f; a mask generator re-sized to `grid` with
    the same masked share (BEiT's block-wise 75 of 196, MAE's ratio)."""
    out = []
    for step in pipeline:
        step = {k: scaled(v, f) if k in SIZE_KEYS else v for k, v in step.items()}
        if 'input_size' in step and grid is not None:  # a mask generator
            share = grid * grid / (step['input_size'] ** 2)
            step['input_size'] = grid
            if 'num_masking_patches' in step:
                step['num_masking_patches'] = max(2, round(step['num_masking_patches'] * share))
                step['min_num_patches'] = max(1, min(step['num_masking_patches'] // 2,
                                                     round(step['min_num_patches'] * share)))
        out.append(step)
    return out


def image_loader(cfg_loader, data: Path, prefix: str, f: float, grid: int | None = None,
                 with_label: bool = True) -> dict:
    """The config's data loader on an image folder (CustomDataset) with its own pipeline
    (mmengine's default_collate, as every shipped image config)."""
    return dict(_delete_=True, batch_size=4, num_workers=0, persistent_workers=False,
                sampler=dict(type='DefaultSampler', shuffle=True),
                collate_fn=dict(type='default_collate'),
                dataset=dict(type='CustomDataset', data_root=str(data),
                             data_prefix=prefix,
                             with_label=with_label,
                             pipeline=scaled_pipeline(cfg_loader.dataset.pipeline, f, grid)))


def schedule(iters: int = ITERS, validate: bool = False) -> dict:
    return {'train_cfg': dict(_delete_=True, type='IterBasedTrainLoop', max_iters=iters,
                              **(dict(val_interval=iters) if validate else {})),
            'param_scheduler': [], 'log_processor': dict(by_epoch=False),
            'default_hooks.logger': dict(type='LoggerHook', interval=1),
            'default_hooks.checkpoint': dict(type='CheckpointHook', by_epoch=False,
                                             interval=iters),
            'randomness': dict(seed=0), 'custom_hooks': []}


def run_link(name: str, wd: Path, options: dict, mode: str = 'train', checkpoint=None):
    """`tools/train.py CONFIG --cfg-options ...` (or tools/test.py) in this process."""
    from peco_mm.supervisor.launch import run
    cfg = PECO / f'{name}.py'
    res = run(str(cfg), str(wd), options, mode, checkpoint=checkpoint)
    if mode == 'train':
        ckpt = wd / f'iter_{ITERS}.pth'
        assert ckpt.is_file(), f'{name}: no {ckpt.name} in {sorted(wd.iterdir())}'
        return ckpt
    return res


# ---- the data and the stand-in weights the chains read ---------------------------------------
def write_resnet50(path: Path) -> Path:
    from torchvision.models import resnet50
    torch.manual_seed(0)
    sd = {k: v for k, v in resnet50(weights=None).state_dict().items()
          if not k.startswith('fc.')}
    torch.save(sd, path)
    return path


def write_vgg16_features(path: Path) -> Path:
    from torchvision.models.vgg import cfgs, make_layers
    torch.manual_seed(0)
    feats = make_layers(cfgs['D'], batch_norm=False)
    torch.save({f'features.{k}': v for k, v in feats.state_dict().items()}, path)
    return path


def write_dalle(folder: Path) -> tuple[Path, Path]:
    """DALL-E at width 16 and K = 64 (the BEiT links' target generator): the encoder as a
    weights file (as OpenMMLab converted the real one), the decoder pickled as a module, as
    OpenAI ships it."""
    from tests.tokenizer.dalle_files import write_tiny_dalle
    enc, dec, _ = write_tiny_dalle(folder, pickled_encoder=False, vocab_size=64, n_hid=16,
                                   n_init=16, blocks_per_group=2)
    return Path(enc), Path(dec)


# ---- the options of each stage ---------------------------------------------------------------
def mocov3_options(data: Path) -> dict:
    cfg = Config.fromfile(PECO / 'mocov3_vitb_100e_in1k.py')
    return {'model.backbone.arch': dict(_delete_=True, feedforward_channels=256, **TINY_ARCH),
            'model.backbone.img_size': IMG,
            'model.neck.in_channels': 64, 'model.neck.hid_channels': 128,
            'model.neck.out_channels': 32, 'model.head.predictor.in_channels': 32,
            'model.head.predictor.hid_channels': 128, 'model.head.predictor.out_channels': 32,
            'train_dataloader': image_loader(cfg.train_dataloader, data, 'train', IMG / 224,
                                             with_label=False),
            **schedule()}


def tokenizer_options(name: str, data: Path, percep: dict) -> dict:
    """Widths / 8, K = 64, D = 16; the row's perceptual network, decoder, discriminator and
    encoder type kept (the discriminator counts from the first iteration)."""
    cfg = Config.fromfile(PECO / f'{name}.py')
    m = cfg.model
    o = {'model.quantizer.embed_dims': 16, 'model.quantizer.num_embeddings': 64}
    for part in ('encoder', 'decoder'):
        if m[part].type.startswith('CNN'):
            o[f'model.{part}.base_channels'] = max(4, m[part].get('base_channels', 64) // 8)
            o[f'model.{part}.num_res_blocks'] = 1
        else:
            o[f'model.{part}'] = dict(arch=dict(_delete_=True, **TINY_ARCH), img_size=IMG,
                                      patch_size=16)
    net = m.perceptual.get('net', 'vit')
    percep_cfg = dict(checkpoint=str(percep[net]))
    if net == 'vit':
        percep_cfg.update(layers=(1, 2, 3, 4), vit_cfg=dict(num_heads=4))
    o['model.perceptual'] = percep_cfg
    o['test_evaluator.perceptual'] = dict(net=net, **percep_cfg)
    o['test_evaluator.num_embeddings'] = 64
    if m.get('codeword_loss') == 'classification':
        o['model.codeword_loss_cfg.num_classes'] = 3
    elif m.get('codeword_loss') == 'contrastive':
        o['model.codeword_loss_cfg'] = dict(queue_size=16, proj_dims=16, hid_dims=32)
    if m.get('adversarial_weight', 0) > 0:
        o['model.adversarial_start_iter'] = 0
        o['model.discriminator.base_channels'] = 8
    f = IMG / 224  # the 8x tokenizer's 112 px becomes 32 px: the same 4 x 4 codes
    o['train_dataloader'] = image_loader(cfg.train_dataloader, data, 'train', f)
    o['test_dataloader'] = image_loader(cfg.test_dataloader, data, 'val', f)
    return {**o, **schedule()}


def vit_options(img: int = IMG) -> dict:
    """The backbone ViT at width 64, depth 4, patch 16 (4 x 4 patches at 64 px); its other
    settings (relative position bias, layer scale, qkv bias, with_cp) as the config has them."""
    return {'model.backbone.arch': dict(_delete_=True, **TINY_ARCH),
            'model.backbone.img_size': img, 'model.backbone.patch_size': 16,
            'model.backbone.drop_path_rate': 0.0}


def pretrain_options(name: str, data: Path, target: str | None) -> dict:
    cfg = Config.fromfile(PECO / f'{name}.py')
    o = vit_options()
    if cfg.model.target_generator.type == 'DALL-E':  # BEiT: a DALL-E encoder file, K = 64
        o['model.target_generator'] = dict(
            _delete_=True, type='DALL-E', n_hid=16, vocab_size=64,
            init_cfg=dict(type='Pretrained', checkpoint=str(target)))
        o['model.head.num_classes'] = 64
    else:
        o['model.target_generator.checkpoint'] = str(target)
    if cfg.model.get('neck', {}).get('type') == 'PeCoMAEDecoder':
        o['model.neck'] = dict(grid=IMG // 16, embed_dims=32, num_layers=1, num_heads=4)
    grid = IMG // 16
    loader = image_loader(cfg.train_dataloader, data, 'train', IMG / 224, grid=grid,
                          with_label=False)
    # the target's view keeps its codes on the ViT's grid: ViT-H's 256 px view at 14 px
    # patches (16 x 16 codes of a 16x tokenizer) becomes 64 px, the 8x tokenizer's 112 px 32
    shipped = cfg.train_dataloader.dataset.pipeline
    two_pic = next(i for i, t in enumerate(shipped) if 'second_size' in t or 'size' in t and
                   t['type'].endswith('TwoPic'))
    masks = next(t for t in shipped if 'input_size' in t)
    second = shipped[two_pic].get('second_size') or shipped[two_pic]['size']
    loader['dataset']['pipeline'][two_pic]['second_size'] = second // masks['input_size'] * grid
    o['train_dataloader'] = loader
    return {**o, **schedule()}


def finetune_options(name: str, data: Path, pretrained: Path) -> dict:
    """3 classes, top-1 only; Mixup / CutMix, RandAugment and layer decay as shipped."""
    cfg = Config.fromfile(PECO / f'{name}.py')
    f = IMG / 224
    img = scaled(cfg.model.backbone.img_size, f)  # the 448 px row fine-tunes at 128 px
    o = vit_options(img)
    o['model.backbone.init_cfg.checkpoint'] = str(pretrained)
    o['model.head.num_classes'] = 3
    o['model.head.in_channels'] = 64
    o['data_preprocessor.num_classes'] = 3
    o['train_dataloader'] = image_loader(cfg.train_dataloader, data, 'train', f)
    o['val_dataloader'] = image_loader(cfg.val_dataloader, data, 'val', f)
    o['val_evaluator'] = dict(type='Accuracy', topk=(1, ))
    return {**o, **schedule(validate=True)}


def dense_loaders(cfg, data_root: str, f: float, val_batch: int) -> dict:
    """The config's train / val loaders (its dataset class and folders) on `data_root`,
    their pipelines' sizes times f."""
    return {f'{split}_dataloader': dict(
        batch_size=2 if split == 'train' else val_batch, num_workers=0,
        persistent_workers=False,
        dataset=dict(data_root=data_root, pipeline=scaled_pipeline(
            cfg[f'{split}_dataloader'].dataset.pipeline, f))) for split in ('train', 'val')}


def seg_options(name: str, ade: Path, pretrained: Path) -> dict:
    """UperNet at 64 px crops (the paper's 512 scaled by 1/8), pyramid widths 64."""
    cfg = Config.fromfile(PECO / f'{name}.py')
    f = 64 / 512
    o = vit_options()
    o.update({'model.backbone.init_cfg.checkpoint': str(pretrained),
              'model.data_preprocessor.size': (64, 64),
              'model.decode_head.in_channels': [64] * 4, 'model.decode_head.channels': 32,
              'model.auxiliary_head.in_channels': 64, 'model.auxiliary_head.channels': 16,
              'model.test_cfg.crop_size': (64, 64), 'model.test_cfg.stride': (48, 48)})
    return {**o, **dense_loaders(cfg, str(ade), f, val_batch=1), **schedule(validate=True)}


def det_options(name: str, coco: Path, pretrained: Path) -> dict:
    """Mask R-CNN on 96 px images (the paper's 800 scaled by 0.12), neck and heads narrowed."""
    cfg = Config.fromfile(PECO / f'{name}.py')
    f = 96 / 800
    o = vit_options()
    o.update({'model.backbone.init_cfg.checkpoint': str(pretrained),
              'model.neck.in_channels': [64] * 4, 'model.neck.out_channels': 32,
              'model.rpn_head.in_channels': 32, 'model.rpn_head.feat_channels': 32,
              'model.roi_head.bbox_roi_extractor.out_channels': 32,
              'model.roi_head.bbox_head.in_channels': 32,
              'model.roi_head.bbox_head.fc_out_channels': 64,
              'model.roi_head.mask_roi_extractor.out_channels': 32,
              'model.roi_head.mask_head.in_channels': 32,
              'model.roi_head.mask_head.conv_out_channels': 32,
              'model.train_cfg.rpn_proposal.nms_pre': 200,
              'model.train_cfg.rpn_proposal.max_per_img': 100,
              'model.train_cfg.rcnn.sampler.num': 64,
              'model.test_cfg.rpn.nms_pre': 200, 'model.test_cfg.rpn.max_per_img': 100,
              'val_evaluator.ann_file': str(coco / 'annotations' / 'instances_val2017.json')})
    return {**o, **dense_loaders(cfg, f'{coco}/', f, val_batch=2), **schedule(validate=True)}


def video_options(name: str, videos: dict, pretrained: Path) -> dict:
    """TimeSformer on clips of 2 frames at 64 px, 2 classes; the shipped sampling kept
    (SampleFrames for K400, UniformSample for SSv2) at 2 frames."""
    cfg = Config.fromfile(PECO / f'{name}.py')
    o = vit_options()
    o.update({'model.backbone.num_frames': 2, 'model.backbone.init_cfg.checkpoint':
              str(pretrained), 'model.cls_head.in_channels': 64, 'model.cls_head.num_classes': 2})
    for split in ('train', 'val'):
        pipeline = scaled_pipeline(cfg[f'{split}_dataloader'].dataset.pipeline, IMG / 224)
        for step in pipeline:
            if 'clip_len' in step:
                step.update(clip_len=2, **({'frame_interval': 1} if 'frame_interval' in step
                                           else {}))
        o[f'{split}_dataloader'] = dict(
            batch_size=2, num_workers=0, persistent_workers=False,
            dataset=dict(ann_file=str(videos[split]),
                         data_prefix=dict(video=str(videos[split].parent)), pipeline=pipeline))
    return {**o, **schedule(validate=True)}


def write_deit_tiny_classifier(path: Path) -> Path:
    """An mmpretrain ViT classifier checkpoint at the toy width (the DeiT-T recipe's
    classifier, 3 classes)."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(dict(
            type='ImageClassifier',
            backbone=dict(type='VisionTransformer', img_size=IMG, patch_size=16,
                          arch=dict(feedforward_channels=256, **TINY_ARCH)),
            head=dict(type='VisionTransformerClsHead', num_classes=3, in_channels=64)))
    model.init_weights()
    torch.save({'state_dict': model.state_dict()}, path)
    return path


def write_deit(path: Path) -> Path:
    """A DeiT-style release file (timm names under 'model') at the toy width."""
    from timm.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    vit = VisionTransformer(img_size=IMG, patch_size=16, embed_dim=64, depth=4, num_heads=4,
                            num_classes=10)
    torch.save({'model': vit.state_dict()}, path)
    return path


# ---- the chains ------------------------------------------------------------------------------
TOKENIZERS = ('tokenizer_vqvae_in1k', 'tokenizer_vqvae_lambda0_in1k',
              'tokenizer_vqvae_lambda0p3_in1k', 'tokenizer_vqvae_lambda3_in1k',
              'tokenizer_vqvae_lambda10_in1k', 'tokenizer_vqvae_resnet50_in1k',
              'tokenizer_vqvae_vgg16_in1k', 'tokenizer_vqvae_adv_in1k',
              'tokenizer_vqvae_halfdec_in1k', 'tokenizer_vit_in1k', 'tokenizer_vqvae_lite_in1k',
              'tokenizer_vqvae_8x_in1k', 'tokenizer_vqvae_cls_in1k',
              'tokenizer_vqvae_contrastive_in1k')
# the ablation tokenizers: each one's codes pretrain the 300-epoch ViT-B (the 8x and lite
# tokenizers have pretraining configs of their own)
ABLATION_TOKENIZERS = tuple(t for t in TOKENIZERS if t not in (
    'tokenizer_vqvae_in1k', 'tokenizer_vqvae_8x_in1k', 'tokenizer_vqvae_lite_in1k'))
HALF_DEPTH = 'tokenizer_vqvae_in1k+decoder_num_res_blocks=1'
# pretraining config -> the tokenizer whose codes it predicts (None: BEiT's DALL-E)
PRETRAININGS = {'pretrain_vitb_in1k_300e': 'tokenizer_vqvae_in1k',
                'pretrain_vitb_in1k_800e': 'tokenizer_vqvae_in1k',
                'pretrain_lite_vitb_in1k_300e': 'tokenizer_vqvae_lite_in1k',
                'pretrain_lite_vitb_in1k_800e': 'tokenizer_vqvae_lite_in1k',
                'pretrain_8x_vitb_in1k_300e': 'tokenizer_vqvae_8x_in1k',
                'pretrain_beit_dalle_vitb_in1k_300e': None,
                'pretrain_vitl_in1k_800e': 'tokenizer_vqvae_in1k',
                'pretrain_vitl_in1k_800e_accum': 'tokenizer_vqvae_in1k',
                'pretrain_vith_in1k_800e': 'tokenizer_vqvae_in1k',
                'pretrain_vith_in1k_800e_accum': 'tokenizer_vqvae_in1k',
                'pretrain_mae_vitb_in1k_800e': 'tokenizer_vqvae_in1k'}
# (fine-tuning config, the pretraining it starts from)
FINETUNINGS = (('finetune_vitb_in1k', 'pretrain_vitb_in1k_300e'),
               ('finetune_vitb_in1k', 'pretrain_vitb_in1k_800e'),
               ('finetune_vitb_in1k', 'pretrain_8x_vitb_in1k_300e'),
               ('finetune_lite_vitb_in1k', 'pretrain_lite_vitb_in1k_300e'),
               ('finetune_lite_vitb_in1k', 'pretrain_lite_vitb_in1k_800e'),
               ('finetune_beit_dalle_vitb_in1k', 'pretrain_beit_dalle_vitb_in1k_300e'),
               ('finetune_vitl_in1k', 'pretrain_vitl_in1k_800e'),
               ('finetune_vith_in1k', 'pretrain_vith_in1k_800e'),
               ('finetune_vith_448_in1k', 'pretrain_vith_in1k_800e'),
               ('finetune_mae_vitb_in1k', 'pretrain_mae_vitb_in1k_800e'))


# (dense config, the pretraining it starts from)
DENSE = (('upernet_vitb_ade20k', 'pretrain_vitb_in1k_800e'),
         ('upernet_vitl_ade20k', 'pretrain_vitl_in1k_800e'),
         ('upernet_mae_vitb_ade20k', 'pretrain_mae_vitb_in1k_800e'),
         ('mask_rcnn_vitb_coco', 'pretrain_vitb_in1k_800e'),
         ('mask_rcnn_vitl_coco', 'pretrain_vitl_in1k_800e'),
         ('mask_rcnn_mae_vitb_coco', 'pretrain_mae_vitb_in1k_800e'))
VIDEO = (('timesformer_vitb_k400', 'pretrain_vitb_in1k_800e'),
         ('timesformer_vitb_ssv2', 'pretrain_vitb_in1k_800e'),
         ('timesformer_beit_vitb_k400', 'pretrain_beit_dalle_vitb_in1k_300e'),
         ('timesformer_beit_vitb_ssv2', 'pretrain_beit_dalle_vitb_in1k_300e'),
         ('timesformer_deit_vitb_k400', 'DeiT release'),
         ('timesformer_deit_vitb_ssv2', 'DeiT release'))


class Chains:
    """What the links wrote, by link name: checkpoints, and the metrics of test runs."""

    def __init__(self, root: Path):
        from peco_mm.tooling.demo_data import make_class_folder
        self.root = root
        self.data = root / 'imagenet'
        make_class_folder(self.data / 'train', size=IMG, per_class=4)
        make_class_folder(self.data / 'val', size=IMG, per_class=2, seed=1)
        self.out: dict[str, object] = {}
        self.inputs: dict[str, Path | None] = {}

    def train(self, key: str, config: str, options: dict, source: Path | None = None) -> Path:
        """One training link; `source`: the file of an earlier link (or a stand-in) it reads."""
        self.inputs[key] = source
        with mmengine_instances_dropped():
            self.out[key] = run_link(config, self.root / key.replace('+', '_'), options)
        return self.out[key]

    def perceptual_networks(self) -> dict:
        moco = self.train('mocov3_vitb_100e_in1k', 'mocov3_vitb_100e_in1k',
                          mocov3_options(self.data))
        vit = self.root / 'mocov3_tiny_pecovit.pth'
        assert load_tool('convert_checkpoint').main([str(moco), str(vit), '--num-heads', '4']) == 0
        self.out['convert_checkpoint'] = vit
        return dict(vit=vit, resnet50=write_resnet50(self.root / 'resnet50.pth'),
                    vgg16=write_vgg16_features(self.root / 'vgg16_features.pth'))

    def tokenizers(self, percep: dict) -> None:
        for key, name, extra in [(t, t, {}) for t in TOKENIZERS] + [
                (HALF_DEPTH, 'tokenizer_vqvae_in1k', {'model.decoder.num_res_blocks': 1})]:
            options = {**tokenizer_options(name, self.data, percep), **extra}
            self.train(key, name, options, Path(options['model.perceptual']['checkpoint']))

    def pretrainings(self) -> None:
        self.dalle = write_dalle(self.root)
        for name, tok in PRETRAININGS.items():
            target = self.out[tok] if tok else self.dalle[0]
            self.train(name, name, pretrain_options(name, self.data, target), target)
        for tok in ABLATION_TOKENIZERS + (HALF_DEPTH, ):
            self.train(f'pretrain_vitb_in1k_300e+{tok}', 'pretrain_vitb_in1k_300e',
                       pretrain_options('pretrain_vitb_in1k_300e', self.data, self.out[tok]),
                       self.out[tok])

    def finetunings(self) -> None:
        for name, pre in FINETUNINGS:
            self.train(f'{name}+{pre}', name, finetune_options(name, self.data, self.out[pre]),
                       self.out[pre])

    def dense(self) -> None:
        from peco_mm.tooling.demo_data import make_ade, make_coco
        ade, coco = make_ade(self.root / 'ade'), make_coco(self.root / 'coco')
        for name, pre in DENSE:
            options = (seg_options(name, ade, self.out[pre]) if name.startswith('upernet') else
                       det_options(name, coco, self.out[pre]))
            self.train(f'{name}+{pre}', name, options, self.out[pre])

    def videos(self) -> None:
        from tests.models.test_video_vit import write_videos
        clips = dict(train=write_videos(self.root / 'k400' / 'train', per_class=2, seed=0),
                     val=write_videos(self.root / 'k400' / 'val', per_class=1, seed=1))
        deit = write_deit(self.root / 'deit_base_patch16_224.pth')
        for name, pre in VIDEO:
            start = deit if pre == 'DeiT release' else self.out[pre]
            self.train(f'{name}+{pre}', name, video_options(name, clips, start), start)

    def config_file(self, config: str, options: dict) -> Path:
        """The shipped config with the options merged, written out for a tool that takes a
        config file and no --cfg-options."""
        cfg = Config.fromfile(PECO / f'{config}.py')
        cfg.merge_from_dict(options)
        path = self.root / f'{config}_toy.py'
        cfg.dump(path)
        return path

    def test(self, key: str, config: str, options: dict, checkpoint: Path) -> dict:
        with mmengine_instances_dropped():
            res = run_link(config, self.root / key.replace('+', '_'), options, mode='test',
                           checkpoint=str(checkpoint))
        self.out[key] = res.metrics
        return res.metrics

    def codeword_semantics(self, percep: dict) -> None:
        """Table 4: the proxy probe (tools/test.py on each tokenizer), the linear probe on
        pooled codewords, and a DeiT-T classifying the reconstructions."""
        for tok in ('tokenizer_vqvae_in1k', 'tokenizer_vqvae_lambda0_in1k'):
            self.test(f'test+{tok}', tok, tokenizer_options(tok, self.data, percep),
                      self.out[tok])
            cfg = Config.fromfile(PECO / 'linear_codewords_in1k.py')
            self.train(f'linear_codewords_in1k+{tok}', 'linear_codewords_in1k', {
                'model.backbone.checkpoint': str(self.out[tok]),
                'model.neck.input_features': 16, 'model.head.num_classes': 3,
                'model.head.in_channels': 16,
                'train_dataloader': image_loader(cfg.train_dataloader, self.data, 'train',
                                                 IMG / 224),
                'val_dataloader': image_loader(cfg.val_dataloader, self.data, 'val', IMG / 224),
                'val_evaluator': dict(type='Accuracy', topk=(1, )), **schedule(validate=True)},
                self.out[tok])
            cfg = Config.fromfile(PECO / 'recon_deit_tiny_in1k.py')
            self.test(f'recon_deit_tiny_in1k+{tok}', 'recon_deit_tiny_in1k', {
                'model.backbone.arch': dict(_delete_=True, feedforward_channels=256, **TINY_ARCH),
                'model.backbone.img_size': IMG, 'model.backbone.tokenizer': str(self.out[tok]),
                'model.head.num_classes': 3, 'model.head.in_channels': 64,
                'data_preprocessor.num_classes': 3,
                'test_dataloader': image_loader(cfg.test_dataloader, self.data, 'val',
                                                IMG / 224),
                'test_evaluator': dict(type='Accuracy', topk=(1, ))},
                write_deit_tiny_classifier(self.root / 'deit_tiny.pth'))

    def dalle_codeword_semantics(self) -> None:
        """Table 4's DALL-E row: the linear probe on DALL-E's code embeddings, and the DeiT-T
        on DALL-E's reconstructions."""
        enc, dec = map(str, self.dalle)
        tok = {'model.backbone.tokenizer.encoder': enc, 'model.backbone.tokenizer.decoder': dec}
        cfg = Config.fromfile(PECO / 'linear_codewords_dalle_in1k.py')
        self.train('linear_codewords_dalle_in1k+dalle', 'linear_codewords_dalle_in1k', {
            **tok, 'model.neck.input_features': 16, 'model.head.num_classes': 3,
            'model.head.in_channels': 16,
            'train_dataloader': image_loader(cfg.train_dataloader, self.data, 'train', IMG / 224),
            'val_dataloader': image_loader(cfg.val_dataloader, self.data, 'val', IMG / 224),
            'val_evaluator': dict(type='Accuracy', topk=(1, )), **schedule(validate=True)},
            self.dalle[1])
        cfg = Config.fromfile(PECO / 'recon_deit_tiny_dalle_in1k.py')
        self.test('recon_deit_tiny_dalle_in1k+dalle', 'recon_deit_tiny_dalle_in1k', {
            **tok, 'model.backbone.arch': dict(_delete_=True, feedforward_channels=256,
                                               **TINY_ARCH),
            'model.backbone.img_size': IMG, 'model.head.num_classes': 3,
            'model.head.in_channels': 64, 'data_preprocessor.num_classes': 3,
            'test_dataloader': image_loader(cfg.test_dataloader, self.data, 'val', IMG / 224),
            'test_evaluator': dict(type='Accuracy', topk=(1, ))},
            write_deit_tiny_classifier(self.root / 'deit_tiny.pth'))

    def agreement(self, percep: dict) -> None:
        """Fig. 1: tools/perceptual_agreement.py on a BAPPS-layout subset."""
        from tests.tokenizer.test_perceptual_agreement import write_subset
        write_subset(self.root / 'bapps' / '2afc' / 'val' / 'toy', swap=False)
        out = self.root / 'agreement.json'
        load_tool('perceptual_agreement').main([
            str(self.root / 'bapps' / '2afc' / 'val'), '--size', str(IMG),
            '--tokenizer', str(self.out['tokenizer_vqvae_in1k']),
            '--perceptual-checkpoint', str(percep['vit']), '--perceptual-layers', '1', '2',
            '3', '4', '--dalle-encoder', str(self.dalle[0]), '--dalle-decoder',
            str(self.dalle[1]), '--out', str(out)])
        self.out['perceptual_agreement'] = json.loads(out.read_text())

    def figures(self) -> None:
        """Fig. 3: reconstructions of the lambda = 1 and lambda = 0 tokenizers; Fig. 4: the
        PeCo model's masked-token predictions decoded (tools/visualize_*.py)."""
        for tok in ('tokenizer_vqvae_in1k', 'tokenizer_vqvae_lambda0_in1k'):
            out = self.root / f'recon_{tok}.png'
            load_tool('visualize_reconstructions').main([
                str(self.out[tok]), str(self.data / 'val'), '--out', str(out), '--num', '4',
                '--img-size', str(IMG), '--device', 'cpu'])
            self.out[f'visualize_reconstructions+{tok}'] = out
        pre = 'pretrain_vitb_in1k_300e'
        cfg = self.config_file(pre, pretrain_options(pre, self.data,
                                                     self.out['tokenizer_vqvae_in1k']))
        out = self.root / 'mim'
        load_tool('visualize_mim').main([
            str(cfg), str(self.out[pre]),
            *map(str, sorted((self.data / 'val').rglob('*.png'))[:2]),
            '--tokenizer', str(self.out['tokenizer_vqvae_in1k']), '--out', str(out),
            '--device', 'cpu'])
        self.out[f'visualize_mim+{pre}'] = out / 'grid.png'
        pre = 'pretrain_beit_dalle_vitb_in1k_300e'  # Fig. 4's BEiT side: DALL-E's decoder
        cfg = self.config_file(pre, pretrain_options(pre, self.data, self.dalle[0]))
        out = self.root / 'mim_beit'
        load_tool('visualize_mim').main([
            str(cfg), str(self.out[pre]),
            *map(str, sorted((self.data / 'val').rglob('*.png'))[:2]),
            '--dalle-decoder', str(self.dalle[1]), '--out', str(out), '--device', 'cpu'])
        self.out[f'visualize_mim+{pre}'] = out / 'grid.png'

    def robustness(self) -> None:
        """Table 11: tools/adversarial_eval.py on the classifier fine-tuned from the
        300-epoch pretraining."""
        key = 'finetune_vitb_in1k+pretrain_vitb_in1k_300e'
        opts = finetune_options('finetune_vitb_in1k', self.data, self.out[key])
        opts['test_dataloader'] = copy.deepcopy(opts['val_dataloader'])  # merging pops keys
        opts['test_evaluator'] = copy.deepcopy(opts['val_evaluator'])
        cfg = self.config_file('finetune_vitb_in1k', opts)
        out = self.root / 'adversarial.json'
        self.out['adversarial_eval'] = load_tool('adversarial_eval').main([
            str(cfg), str(self.out[key]), '--iters', '2',
            '--device', 'cpu', '--out', str(out)])


def memo_format_code():
    """yapf's FormatCode remembered per text: mmengine formats a run's config text five times
    (the work dir's copy, the log, the visualizer, the checkpoint's meta), which is most of a
    toy run's time. The output is the same; only the repeats are skipped."""
    import mmengine.config.config as mm_config
    format_code, seen = mm_config.FormatCode, {}

    def remembered(text, style_config=None, **kw):
        key = (text, repr(style_config), repr(sorted(kw.items())))
        if key not in seen:
            seen[key] = format_code(text, style_config=style_config, **kw)
        return seen[key]
    return mm_config, remembered


@pytest.fixture(scope='module')
def chains(tmp_path_factory):
    c = Chains(tmp_path_factory.mktemp('chains'))
    with pytest.MonkeyPatch.context() as mp:
        module, remembered = memo_format_code()
        mp.setattr(module, 'FormatCode', remembered)
        percep = c.perceptual_networks()
        c.tokenizers(percep)
        c.pretrainings()
        c.finetunings()
        c.dense()
        c.videos()
        c.codeword_semantics(percep)
        c.dalle_codeword_semantics()
        c.agreement(percep)
        c.figures()
        c.robustness()
    return c


# ---- docs/reproduce.md's rows and the links that run them ------------------------------------
# link keys: CONFIG (trained), CONFIG+INPUT (trained from INPUT's output), test+CONFIG
# (tools/test.py), and the tools by name
ABLATION = 'pretrain_vitb_in1k_300e+{}'
ROW_LINKS = {
    'perceptual network (Sec. 3.2): MoCo v3 ViT-B, 100 epochs': [
        'mocov3_vitb_100e_in1k', 'convert_checkpoint', 'tokenizer_vqvae_in1k'],
    '4 (codeword semantics): λ = 1, probe 29.7, DeiT-T on reconstructions 51.7': [
        'tokenizer_vqvae_in1k', 'test+tokenizer_vqvae_in1k',
        'recon_deit_tiny_in1k+tokenizer_vqvae_in1k'],
    '4: λ = 0, probe 10.2, DeiT-T 17.9': [
        'tokenizer_vqvae_lambda0_in1k', 'test+tokenizer_vqvae_lambda0_in1k',
        'recon_deit_tiny_in1k+tokenizer_vqvae_lambda0_in1k'],
    '4: DALL-E, probe 6.1, DeiT-T 18.2': [
        'linear_codewords_dalle_in1k+dalle', 'recon_deit_tiny_dalle_in1k+dalle'],
    '4: the codeword linear probe itself (29.7 / 10.2)': [
        'linear_codewords_in1k+tokenizer_vqvae_in1k',
        'linear_codewords_in1k+tokenizer_vqvae_lambda0_in1k'],
    'Fig. 1 (agreement with human judgement, BAPPS 2AFC): L2 / PeCo codebook / perceptual / '
    'DALL-E codebook distance': ['perceptual_agreement'],
    'Fig. 3 (reconstructions with and without the perceptual loss)': [
        'visualize_reconstructions+tokenizer_vqvae_in1k',
        'visualize_reconstructions+tokenizer_vqvae_lambda0_in1k'],
    'Fig. 4 (masked patches predicted by PeCo and by BEiT, decoded)': [
        'pretrain_vitb_in1k_300e', 'visualize_mim+pretrain_vitb_in1k_300e',
        'pretrain_beit_dalle_vitb_in1k_300e',
        'visualize_mim+pretrain_beit_dalle_vitb_in1k_300e'],
    '6 (implicit vs explicit): classification / contrastive loss on the codewords': [
        link for loss in ('cls', 'contrastive') for link in (
            f'tokenizer_vqvae_{loss}_in1k', ABLATION.format(f'tokenizer_vqvae_{loss}_in1k'))],
    '10 (perceptual loss weight): λ = 0 / 0.3 / 3 / 10': [
        link for lam in ('0', '0p3', '3', '10') for link in (
            f'tokenizer_vqvae_lambda{lam}_in1k',
            ABLATION.format(f'tokenizer_vqvae_lambda{lam}_in1k'))],
    '5 (perceptual network): SSL ResNet-50 / supervised VGG': [
        link for net in ('resnet50', 'vgg16') for link in (
            f'tokenizer_vqvae_{net}_in1k', ABLATION.format(f'tokenizer_vqvae_{net}_in1k'))],
    '7 (loss functions): + adversarial loss': [
        'tokenizer_vqvae_adv_in1k', ABLATION.format('tokenizer_vqvae_adv_in1k')],
    '12 (VQ-VAE architectures): 8× / half-channel decoder / ViT-B encoder and decoder': [
        'tokenizer_vqvae_8x_in1k', 'pretrain_8x_vitb_in1k_300e',
        'tokenizer_vqvae_halfdec_in1k', ABLATION.format('tokenizer_vqvae_halfdec_in1k'),
        'tokenizer_vit_in1k', ABLATION.format('tokenizer_vit_in1k')],
    '12: 8× tokenizer → pretraining → fine-tuning (83.8)': [
        'tokenizer_vqvae_8x_in1k', 'pretrain_8x_vitb_in1k_300e',
        'finetune_vitb_in1k+pretrain_8x_vitb_in1k_300e'],
    '12: half-depth decoder': [HALF_DEPTH, ABLATION.format(HALF_DEPTH)],
    '2 (tokenizer comparison): PeCo_lite tokenizer': ['tokenizer_vqvae_lite_in1k'],
    '2: PeCo ViT-B 300 ep (84.1)': [
        'pretrain_vitb_in1k_300e', 'finetune_vitb_in1k+pretrain_vitb_in1k_300e'],
    '1 (ImageNet-1K) and 2: PeCo ViT-B 800 ep (84.5)': [
        'pretrain_vitb_in1k_800e', 'finetune_vitb_in1k+pretrain_vitb_in1k_800e'],
    '2: PeCo_lite 300 / 800 ep (84.0 / 84.5)': [
        'pretrain_lite_vitb_in1k_300e', 'pretrain_lite_vitb_in1k_800e',
        'finetune_lite_vitb_in1k+pretrain_lite_vitb_in1k_300e',
        'finetune_lite_vitb_in1k+pretrain_lite_vitb_in1k_800e'],
    '2: BEiT baseline, DALL-E codes, 300 ep (82.8)': [
        'pretrain_beit_dalle_vitb_in1k_300e',
        'finetune_beit_dalle_vitb_in1k+pretrain_beit_dalle_vitb_in1k_300e'],
    '1: PeCo ViT-L 800 ep (86.5)': [
        'pretrain_vitl_in1k_800e', 'pretrain_vitl_in1k_800e_accum',
        'finetune_vitl_in1k+pretrain_vitl_in1k_800e'],
    '1: PeCo ViT-H 800 ep (87.5; 88.3 at 448 px)': [
        'pretrain_vith_in1k_800e', 'pretrain_vith_in1k_800e_accum',
        'finetune_vith_in1k+pretrain_vith_in1k_800e',
        'finetune_vith_448_in1k+pretrain_vith_in1k_800e'],
    '3 (ADE20K / COCO): UperNet 48.5 mIoU': [
        'upernet_vitb_ade20k+pretrain_vitb_in1k_800e',
        'upernet_vitl_ade20k+pretrain_vitl_in1k_800e'],
    '3: Mask R-CNN 1x 47.8 / 42.6 AP': [
        'mask_rcnn_vitb_coco+pretrain_vitb_in1k_800e',
        'mask_rcnn_vitl_coco+pretrain_vitl_in1k_800e'],
    '8 (PeCo_MAE): 84.2 / 48.2 / 47.3 / 42.2': [
        'pretrain_mae_vitb_in1k_800e', 'finetune_mae_vitb_in1k+pretrain_mae_vitb_in1k_800e',
        'upernet_mae_vitb_ade20k+pretrain_mae_vitb_in1k_800e',
        'mask_rcnn_mae_vitb_coco+pretrain_mae_vitb_in1k_800e'],
    '9 (video, appendix): PeCo TimeSformer, K400 76.5 / SSv2 61.8': [
        'pretrain_vitb_in1k_800e', 'timesformer_vitb_k400+pretrain_vitb_in1k_800e',
        'timesformer_vitb_ssv2+pretrain_vitb_in1k_800e'],
    '9: BEiT 75.5 / 60.2; DeiT-B 75.4 / 57.6': [
        'timesformer_beit_vitb_k400+pretrain_beit_dalle_vitb_in1k_300e',
        'timesformer_beit_vitb_ssv2+pretrain_beit_dalle_vitb_in1k_300e',
        'timesformer_deit_vitb_k400+DeiT release', 'timesformer_deit_vitb_ssv2+DeiT release'],
    '11 (adversarial robustness): PeCo 300 ep, BIM 52.5 / MIM 55.3': [
        'finetune_vitb_in1k+pretrain_vitb_in1k_300e', 'adversarial_eval'],
}


RESULT_KEYS = {'test': {'tokenizer/psnr', 'tokenizer/perceptual', 'tokenizer/codeword_probe_acc'},
               'recon_deit_tiny_in1k': {'accuracy/top1'},
               'recon_deit_tiny_dalle_in1k': {'accuracy/top1'},
               'perceptual_agreement': {'l2', 'codebook', 'perceptual', 'dalle'},
               'adversarial_eval': {'top1_clean', 'top1_bim', 'top1_mifgsm'}}


def expand(pattern: str) -> list[str]:
    """'a_{x,y}_b' -> ['a_x_b', 'a_y_b'], nested left to right."""
    m = re.search(r'\{([^{}]*)\}', pattern)
    if not m:
        return [pattern]
    return [out for alt in m.group(1).split(',')
            for out in expand(pattern[:m.start()] + alt.strip() + pattern[m.end():])]


def reproduce_rows() -> dict[str, set[str]]:
    """docs/reproduce.md's table: row label -> the config and tool names its commands give."""
    text = (ROOT / 'docs' / 'reproduce.md').read_text()
    table = text.split('| paper table (subject) / row |', 1)[1].split('\n\n', 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        label, commands = [c.strip() for c in line.strip().strip('|').split('|')][:2]
        names = re.findall(r'(?:[\w./-]|\{[^}]*\})+\.py\b', commands)
        rows[label] = {Path(n).stem for p in names for n in expand(p)}
    return rows


def link_names(key: str) -> set[str]:
    """The configs and tools a link runs."""
    first, _, rest = key.partition('+')
    if first == 'test':  # tools/test.py CONFIG
        return {'test', rest}
    if first.startswith('recon_deit_tiny'):  # tools/test.py on the classifier's checkpoint
        return {'test', first}
    return {first}


def test_every_row_of_the_table_has_a_chain_naming_what_the_row_names():
    rows = reproduce_rows()
    assert len(rows) >= 23, sorted(rows)
    assert set(rows) == set(ROW_LINKS), (
        f'rows without a chain here: {sorted(set(rows) - set(ROW_LINKS))}; chains for rows '
        f'the table no longer has: {sorted(set(ROW_LINKS) - set(rows))}')
    for label, names in rows.items():
        ran = set().union(*map(link_names, ROW_LINKS[label]))
        assert names <= ran, f'{label!r}: the table names {sorted(names - ran)}, not run here'


@pytest.mark.slow
@pytest.mark.parametrize('label', list(ROW_LINKS))
def test_each_rows_chain_runs_at_toy_size(chains, label):
    """Every link of the row ran: a trained link left its checkpoint and finite losses, and
    a link started from another's output read that file; a test link reported its metrics."""
    for key in ROW_LINKS[label]:
        assert key in chains.out, f'{label!r}: link {key!r} did not run'
        out = chains.out[key]
        if key in chains.inputs:  # a training run
            losses = [v for r in scalars(out.parent) for k, v in r.items()
                      if k.startswith('loss')]
            assert losses and all(np.isfinite(losses)), (key, losses)
            source = chains.inputs[key]
            if source is not None:
                assert str(source) in run_log(out.parent), f'{key}: {source} not read'
        elif isinstance(out, Path):  # a converted file, a figure
            assert out.is_file() and out.stat().st_size > 0, key
        else:  # the metrics of tools/test.py or the results of a tool
            want = RESULT_KEYS[key.partition('+')[0]]
            got = out.get('toy', out)  # perceptual_agreement: per BAPPS subset
            assert want <= set(got), (key, sorted(got))
