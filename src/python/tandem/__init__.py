"""tandem for Python: `import tandem.torch` registers the torch.distributed backend "tandem"."""
