/* The C quick start: open a store, key a prompt's blocks, put, match, get. */
#include <stdio.h>
#include <string.h>

#include <kvtier/kvtier.h>

int main(void) {
  kvtier_store* store;
  if (kvtier_open("mem://?ram=16MiB", &store) != KVTIER_OK) {
    fprintf(stderr, "open: %s\n", kvtier_last_error());
    return 1;
  }
  kvtier_namespace ns;
  kvtier_namespace_init(&ns);
  ns.model_id = "my-model";
  ns.model_revision = "v1";
  ns.tokenizer_id = "my-tokenizer";
  ns.kv_dtype = "bf16";
  ns.kv_layout = "NHD";
  uint16_t h;
  uint32_t tokens[64];
  for (int i = 0; i < 64; ++i) tokens[i] = (uint32_t)(1000 + i);
  kvtier_key keys[4];
  size_t n;
  if (kvtier_register_namespace(store, &ns, &h) != KVTIER_OK ||
      kvtier_block_keys(&ns, tokens, 64, keys, 4, &n) != KVTIER_OK) {
    fprintf(stderr, "namespace: %s\n", kvtier_last_error());
    return 1;
  }
  static char block[4][4096], back[4][4096];
  const void* data[4];
  void* bufs[4];
  size_t lens[4];
  for (int i = 0; i < 4; ++i) {
    memset(block[i], 'a' + i, sizeof block[i]);
    data[i] = block[i];
    bufs[i] = back[i];
    lens[i] = sizeof block[i];
  }
  kvtier_put_result put[4];
  kvtier_get_result got[4];
  kvtier_match_result m;
  if (kvtier_batch_put(store, h, keys, data, lens, n, put) != KVTIER_OK ||
      kvtier_match_prefix(store, h, keys, n, &m) != KVTIER_OK ||
      kvtier_batch_get_into(store, h, keys, bufs, lens, n, got) != KVTIER_OK) {
    fprintf(stderr, "store: %s\n", kvtier_last_error());
    return 1;
  }
  int ok = m.blocks == 4 && memcmp(block, back, sizeof block) == 0;
  printf("kvtier %s: matched %zu blocks, bytes %s\n", kvtier_version(), m.blocks,
         ok ? "identical" : "DIFFERENT");
  kvtier_close(store);
  return ok ? 0 : 1;
}
