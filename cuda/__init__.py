"""CUDA C sources of the GPU kernels, shipped as package data."""
