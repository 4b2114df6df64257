// Layout of split-K attention partials (S splits, H heads of D), shared by the writers
// (attention.comp, rope_kv_write_attention.comp with SPLIT) and the readers (attention_combine.comp,
// and matmul_add.comp with COMBINE_X, where the o-projection combines them as it loads its input):
//   [S][H * D]  unnormalised o of split s (one row of H * D per split, so a reader of element i
//               takes element i of every split: contiguous vec4 loads), then
//   [S][H][2]   (m, l): the split's score max and sum of exp(score - m); l = 0 for an empty split.
// The combined o_h = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s, M the max over non-empty splits,
// s < attn_live_splits(pos) (attn_live.glsl). With one live split it holds the final o and l = 1,
// so any combine gives o bit for bit as the unsplit kernel would, and readers may just load it.
#define PART_O(s, h, j, H, D) (((s) * (H) + (h)) * (D) + (j))
#define PART_ML(s, h, H, D, S) ((S) * (H) * (D) + 2u * ((s) * (H) + (h)))

#include "attn_live.glsl"
