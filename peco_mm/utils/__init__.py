from .demo_data import make_class_folder

__all__ = ['make_class_folder']
