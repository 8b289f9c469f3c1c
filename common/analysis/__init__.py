"""What a trace says: figures per step, the verdict and its rules, the tables, the summary and the diff
(no torch).
"""
