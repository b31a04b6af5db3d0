"""CUDA C kernel sources of gpumr, installed as ``gpumr.cuda`` package data."""
