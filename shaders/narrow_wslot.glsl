// One weight slot of matmul_rows_narrow_fused.comp: included right after each fused_wslot.glsl
// inclusion, while ROW_WORDS / ROW_SCALES and the renamed decode functions are that slot's (with
// SLOT_DTYPES each slot has its own dtype). Defines, suffixed _<SLOT>:
//   UNITS: nw_unit(m, u, w) the weights of unit u of row m, nw_vec4(u, j) the vec4 of x they multiply
//   else:  nw_elem(m, k) element k of row m
#ifdef UNITS
void FW_CAT(nw_unit_, SLOT)(uint m, uint u, out vec4 w[XU_VEC4]) {
    unit_weights(m * ROW_WORDS(K), m * ROW_SCALES(K), u, w);
}
uint FW_CAT(nw_vec4_, SLOT)(uint u, uint j) { return unit_vec4(u, j); }
#else
float FW_CAT(nw_elem_, SLOT)(uint m, uint k) { return dequant_elem(m * ROW_WORDS(K), m * ROW_SCALES(K), k); }
#endif
