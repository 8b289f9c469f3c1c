"""The trace reader: a Chrome trace's events, streamed and typed, into one model of steps, GPU work and
launches (no torch).
"""
