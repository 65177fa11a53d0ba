from .demo_data import (HELD_OUT_PHOTOS, TRAIN_PHOTOS, make_ade, make_class_folder, make_coco,
                        make_demo_data, make_photo_folder)

__all__ = ['make_class_folder', 'make_photo_folder', 'make_ade', 'make_coco', 'make_demo_data',
           'TRAIN_PHOTOS', 'HELD_OUT_PHOTOS']
