"""Published assets: the registry of short names, layout checks and the downloader.

`wmrl_cli.assets.download` (huggingface_hub underneath) is imported on demand: the registry
and layout checks stay cheap to import for `wmrl download --list` and for presets.
"""

from wmrl_cli.assets.layout import asset_path, check_layout, default_assets_dir
from wmrl_cli.assets.registry import ASSETS, Asset, AssetFile, get_asset, list_assets

__all__ = [
    "ASSETS",
    "Asset",
    "AssetFile",
    "asset_path",
    "check_layout",
    "default_assets_dir",
    "get_asset",
    "list_assets",
]
