"""Integer numerics shared by the int8 reference executor and the lower stage.

Both sides derive every multiplier, shift, table and clamp bound from the
graph's quantization parameters through these functions, so the reference
and the folded kernel parameters cannot drift apart.
"""
