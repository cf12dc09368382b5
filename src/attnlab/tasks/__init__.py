"""Task data: generators, loaders of the public file formats, vocabularies and batching."""
