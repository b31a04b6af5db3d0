"""Example configurations and deployment scripts, installed as ``gpumr.conf`` package data."""
