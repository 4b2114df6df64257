// Key splits of chunk attention on the tensor cores (attention_rows_coop.comp with SPLIT, and
// attention_rows_combine.comp, which must agree on them). Split z of a row holds keys z C ..
// z C + C - 1; C comes from the step's position, so one recorded grid of NSPLIT splits serves every
// chunk: the chunk's keys (pos + T) over NSPLIT, in whole tiles of BKV keys, MINC at least (a
// multiple of BKV), so NSPLIT C >= pos + T.
// Partials of T rows x H heads: [NSPLIT][T][H][D] unnormalised o (split z's rows laid out as o's),
// then [NSPLIT][T][H] (m, l): the split's score reference and sum of exp(score - m).
uint rows_split_keys(uint pos, uint t, uint nsplit, uint minc, uint bkv) {
    const uint per = (pos + t + nsplit - 1u) / nsplit;
    return max(minc, (per + bkv - 1u) / bkv * bkv);
}
#define ROWS_PART_O(z, t, h, T, H, D) ((((z) * (T) + (t)) * (H) + (h)) * (D))
#define ROWS_PART_ML(z, t, h, T, H, D, NS) ((NS) * (T) * (H) * (D) + 2u * (((z) * (T) + (t)) * (H) + (h)))
