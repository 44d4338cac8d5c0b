"""Data on disk: dataset files and their checksums, downloads, the feature cache, audio and
image readers, user folders (``imagefolder``, ``audiofolder``), offline speech synthesis, and
length-bucketed batch samplers. (Which rooms it may import: pyproject.toml, [tool.importlinter].)
"""
