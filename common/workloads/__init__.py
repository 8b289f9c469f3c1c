"""The models the scripts profile: matmul, GeGLU MLP, causal attention, the decoder block of the training
step and DDP's buckets, each with its inputs, reference and physics.
"""
