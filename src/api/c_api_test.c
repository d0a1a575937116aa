/* The C API from C11 alone: golden block keys, round trips through an
 * in-process RAM store and a disk store on a volume file, misses with their
 * reasons, and errors that change nothing. Argument: a volume path to create. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier/kvtier.h"

static int failures = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              kvtier_last_error());                                                            \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

#define BLOCK 65536

static void fill(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)((i * 131u + seed * 7u) >> 3);
}

static void golden_keys(void) {
  kvtier_namespace ns;
  kvtier_namespace_init(&ns);
  ns.model_id = "llama-3-8b";
  ns.model_revision = "r1";
  ns.tokenizer_id = "llama3-tok";
  ns.kv_dtype = "bf16";
  ns.kv_layout = "NHD";
  ns.tokens_per_block = 4;
  const uint32_t tokens[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  kvtier_key digest, keys[4];
  char hex[33];
  size_t n = 0;
  CHECK(kvtier_namespace_digest(&ns, &digest) == KVTIER_OK);
  kvtier_key_to_hex(&digest, hex);
  CHECK(strcmp(hex, "5ca6fbe112807d0a8e68402437311ff4") == 0);
  CHECK(kvtier_block_keys(&ns, tokens, 10, keys, 4, &n) == KVTIER_OK);
  CHECK(n == 2);
  kvtier_key_to_hex(&keys[0], hex);
  CHECK(strcmp(hex, "128f96c6c3911c8ea33dfc521e4f25a6") == 0);
  kvtier_key_to_hex(&keys[1], hex);
  CHECK(strcmp(hex, "8bac8613b843147e65099fe50cbf6d5d") == 0);
  /* N3 of docs/block-keys.md: SHA-256, a tenant salt, tensor-parallel rank 1 of 2. */
  ns.key_scheme = KVTIER_KEYS_SHA256;
  ns.tenant_salt = "tenant-a";
  ns.tp_size = 2;
  ns.tp_rank = 1;
  CHECK(kvtier_block_keys(&ns, tokens, 10, keys, 4, &n) == KVTIER_OK);
  kvtier_key_to_hex(&keys[1], hex);
  CHECK(strcmp(hex, "572481b067fa347fc8360d41cc4e2dd7") == 0);
  /* Too small an array: an error that says how many are needed. */
  CHECK(kvtier_block_keys(&ns, tokens, 10, keys, 1, &n) == KVTIER_ERR_INVALID_ARGUMENT);
  CHECK(n == 2);
  ns.tp_rank = 2; /* rank >= size */
  CHECK(kvtier_namespace_digest(&ns, &digest) == KVTIER_ERR_INVALID_ARGUMENT);
  CHECK(strlen(kvtier_last_error()) > 0);
}

static void make_namespace(kvtier_namespace* ns, const char* model) {
  kvtier_namespace_init(ns);
  ns->model_id = model;
  ns->model_revision = "r1";
  ns->tokenizer_id = "tok";
  ns->kv_dtype = "bf16";
  ns->kv_layout = "NHD";
}

/* Puts `n` blocks made from a token chain; returns their keys in `keys`. */
static void put_chain(kvtier_store* store, uint16_t h, const kvtier_namespace* ns, size_t n,
                      kvtier_key* keys, unsigned char* data) {
  uint32_t tokens[16 * 64];
  size_t nk = 0;
  for (size_t i = 0; i < 16 * n; ++i) tokens[i] = (uint32_t)(i * 7 + 3);
  CHECK(kvtier_block_keys(ns, tokens, 16 * n, keys, n, &nk) == KVTIER_OK && nk == n);
  const void* ptrs[64];
  size_t lens[64];
  kvtier_put_result res[64];
  for (size_t i = 0; i < n; ++i) {
    fill(data + i * BLOCK, BLOCK, (unsigned)i);
    ptrs[i] = data + i * BLOCK;
    lens[i] = BLOCK;
  }
  CHECK(kvtier_batch_put(store, h, keys, ptrs, lens, n, res) == KVTIER_OK);
  for (size_t i = 0; i < n; ++i) CHECK(res[i].outcome != KVTIER_PUT_REFUSED);
}

static void round_trip(const char* uri, size_t n, int expect_disk) {
  kvtier_store* store = NULL;
  CHECK(kvtier_open(uri, &store) == KVTIER_OK);
  if (store == NULL) return;
  kvtier_namespace ns;
  make_namespace(&ns, "c-api-model");
  uint16_t h = 0;
  CHECK(kvtier_register_namespace(store, &ns, &h) == KVTIER_OK);
  kvtier_key keys[64];
  unsigned char* data = malloc(n * BLOCK);
  unsigned char* back = malloc(n * BLOCK);
  put_chain(store, h, &ns, n, keys, data);

  kvtier_match_result m;
  CHECK(kvtier_match_prefix(store, h, keys, n, &m) == KVTIER_OK);
  CHECK(m.blocks == n);
  if (expect_disk) CHECK(m.disk_blocks > 0);

  void* bufs[64];
  size_t caps[64];
  kvtier_get_result got[64];
  for (size_t i = 0; i < n; ++i) {
    bufs[i] = back + i * BLOCK;
    caps[i] = BLOCK;
  }
  memset(back, 0, n * BLOCK);
  CHECK(kvtier_batch_get_into(store, h, keys, bufs, caps, n, got) == KVTIER_OK);
  int disk_hits = 0;
  for (size_t i = 0; i < n; ++i) {
    CHECK(got[i].hit == 1 && got[i].length == BLOCK);
    disk_hits += got[i].tier == KVTIER_TIER_DISK;
  }
  CHECK(memcmp(data, back, n * BLOCK) == 0);
  if (expect_disk) CHECK(disk_hits > 0);

  /* A buffer too small: an error, and no buffer is touched. */
  memset(back, 0xAB, BLOCK);
  caps[0] = BLOCK / 2;
  CHECK(kvtier_batch_get_into(store, h, keys, bufs, caps, 1, got) == KVTIER_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "too small") != NULL);
  CHECK(back[0] == 0xAB && back[BLOCK / 2 - 1] == 0xAB);

  /* Another namespace never sees these blocks. */
  kvtier_namespace other;
  make_namespace(&other, "another-model");
  uint16_t h2 = 0;
  CHECK(kvtier_register_namespace(store, &other, &h2) == KVTIER_OK);
  CHECK(kvtier_match_prefix(store, h2, keys, n, &m) == KVTIER_OK && m.blocks == 0);
  kvtier_get_result g;
  CHECK(kvtier_get(store, h2, &keys[0], back, BLOCK, &g) == KVTIER_OK);
  CHECK(g.hit == 0 && g.miss_reason == KVTIER_MISS_FOREIGN_NAMESPACE);

  /* Remove, then a miss that says not found. */
  int present = 0;
  CHECK(kvtier_remove(store, h, &keys[n - 1], &present) == KVTIER_OK && present == 1);
  CHECK(kvtier_get(store, h, &keys[n - 1], back, BLOCK, &g) == KVTIER_OK);
  CHECK(g.hit == 0 && g.miss_reason == KVTIER_MISS_NOT_FOUND);
  CHECK(strcmp(kvtier_miss_reason_name(g.miss_reason), "not_found") == 0);

  size_t pinned = 0, unpinned = 0;
  CHECK(kvtier_pin(store, h, keys, 1, 60000, &pinned) == KVTIER_OK);
  CHECK(kvtier_unpin(store, h, keys, 1, &unpinned) == KVTIER_OK);
  CHECK(pinned == unpinned);

  kvtier_stats st;
  CHECK(kvtier_get_stats(store, &st) == KVTIER_OK);
  CHECK(st.puts >= n);
  CHECK(st.misses[KVTIER_MISS_NOT_FOUND] >= 1);
  CHECK(st.has_disk == (expect_disk ? 1 : 0));
  kvtier_close(store);
  free(data);
  free(back);
}

int main(int argc, char** argv) {
  CHECK(strlen(kvtier_version()) >= 5);
  golden_keys();
  round_trip("mem://?ram=8MiB&max_object=64KiB", 16, 0);
  if (argc > 1) {
    char uri[4096];
    unlink(argv[1]);
    snprintf(uri, sizeof uri, "file://%s?ram=512KiB&disk=64MiB&max_object=64KiB", argv[1]);
    round_trip(uri, 32, 1);
    unlink(argv[1]);
  }
  kvtier_store* store = NULL;
  CHECK(kvtier_open("nosuch://x", &store) == KVTIER_ERR_INVALID_ARGUMENT && store == NULL);
  CHECK(strstr(kvtier_last_error(), "nosuch") != NULL);
  CHECK(kvtier_open("mem://?rma=1MiB", &store) == KVTIER_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "rma") != NULL);
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("c api: all checks passed\n");
  return 0;
}
