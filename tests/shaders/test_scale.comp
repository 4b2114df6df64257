#version 450
// Test shader for the vk runtime layer: y[i] = x[i] * A + B over N elements.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const float A = 1.0;
layout(constant_id = 2) const float B = 0.0;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n; } p;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) {
        y[i] = x[i] * A + B;
    }
}
