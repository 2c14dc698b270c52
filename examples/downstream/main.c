/* The C ABI from C: one attention call and one refused bad input. */
#include <flashcore/flashcore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fc_tensor contiguous4(void* data, int64_t a, int64_t b, int64_t c, int64_t d) {
  fc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data; t.dtype = FC_F32; t.device = FC_CPU; t.rank = 4;
  t.shape[0] = a; t.shape[1] = b; t.shape[2] = c; t.shape[3] = d;
  t.strides[3] = 1; t.strides[2] = d; t.strides[1] = c * d; t.strides[0] = b * c * d;
  return t;
}

int main(void) {
  enum { B = 1, S = 16, H = 2, D = 32 };
  float* q = malloc(sizeof(float) * B * S * H * D);
  float* o = malloc(sizeof(float) * B * S * H * D);
  for (int i = 0; i < B * S * H * D; ++i) q[i] = (float)((i * 7919) % 101) / 101.0f - 0.5f;
  fc_tensor tq = contiguous4(q, B, S, H, D), to = contiguous4(o, B, S, H, D);
  fc_attention_params p;
  fc_attention_params_init(&p);
  p.causal = 1;
  fc_status st = fc_attention(&tq, &tq, &tq, &to, &p);
  if (st != FC_OK) { fprintf(stderr, "attention failed: %s\n", fc_last_error()); return 1; }
  tq.strides[3] = 2; /* last dim not contiguous: must be refused, naming q */
  st = fc_attention(&tq, &tq, &tq, &to, &p);
  if (st != FC_INVALID_ARGUMENT || strstr(fc_last_error(), "q") == NULL) {
    fprintf(stderr, "bad input not refused as expected: %d %s\n", (int)st, fc_last_error());
    return 1;
  }
  printf("C ABI ok (%s); refused: %s\n", fc_version(), fc_last_error());
  free(q); free(o);
  return 0;
}
