// Model FLOPs of one training step (forward + backward), as dev/bench_cpu.c and dev/bench_gpu.cu count them.
// Included after a trainer (train_natsl.c or train_natsl.cu), whose Model and to_float32 it uses.
//   linear layers   6 · (rows of the input) · weights, for every matmul (the head and the router included)
//   softmax attn    6 · Σ over heads and queries of the keys attended · (d_q + d_v); the N layers' pairs are
//                   counted from the routing of the last forward
//                   (an H layer's: its slots and window keys, doc/model.md §15)
//   GDN recurrence  12 · tokens · H · d_k · d_v per G, N or S layer (state update + read-out, forward and backward);
//                   an H layer's slot updates: 12 · tokens · heads · m · 64
// The embedding lookup, norms and elementwise work are not counted.
#ifndef NATSL_MODEL_FLOPS_H
#define NATSL_MODEL_FLOPS_H

static void step_flops(const Model *M, int B, int T, double *linear, double *attention, double *gdn) {
    const Config *c = &M->cfg;
    int Nc = T / NATSL_CHUNK;
    double BT = (double)B * T, macs = BT * c->Vp * c->D; // head
    for (int i = 0; i < M->ntensors; i++) {
        const ParamTensor *t = &M->tensors[i];
        int s = t->slot;
        if (t->layer < 0) continue;
        if (s == P_WQKV || s == P_WG || s == P_WAB || s == P_WO || s == P_WOW || s == P_WGU || s == P_WDOWN || s == P_WQKV_A ||
            s == P_WO_A || s == P_WALPHA)
            macs += BT * t->numel;
        if (s == P_WR) macs += (double)B * Nc * t->numel;
    }
    double att = 0, rec = 0;
    for (int l = 0; l < c->L; l++) {
        if (c->pattern[l] == 'H') {
            int w = c->nha_w[l];
            double keys = 0;
            for (int t = 0; t < T; t++) keys += (t + 1 < w ? t + 1 : w) + (t >= w ? c->nha_m : 0);
            att += (double)B * cfg_attn_heads(c) * keys * 2 * NATSL_ATTN_HEAD;
            rec += 12.0 * BT * cfg_attn_heads(c) * c->nha_m * NATSL_ATTN_HEAD;
            continue;
        }
        if (c->pattern[l] != 'A') rec += 12.0 * BT * c->H * c->dk * c->dv;   // an S layer runs both its mixers (§7.3)
        if (c->pattern[l] == 'A' || c->pattern[l] == 'S') att += (double)B * cfg_attn_heads(c) * T * (T + 1) / 2.0 * 2 * NATSL_ATTN_HEAD;
        if (c->pattern[l] != 'N') continue;
        float *mask = to_float32(M->la[l].rmask, (size_t)B * Nc * c->H * 2);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < c->Ha; j++) {
                double keys = 0, prefix = 0; // prefix: keys of the earlier softmax-routed chunks
                for (int cq = 0; cq < Nc; cq++) {
                    keys += NATSL_CHUNK * (NATSL_CHUNK + 1) / 2.0 + NATSL_CHUNK * prefix; // own chunk (causal) + earlier
                    prefix += NATSL_CHUNK * mask[(((size_t)b * Nc + cq) * c->H + j / (c->Ha / c->H)) * 2];
                }
                att += keys * (cfg_dka(c) + cfg_dva(c));
            }
        free(mask);
    }
    *linear = 6 * macs;
    *attention = 6 * att;
    *gdn = rec;
}

#endif
