/* kvtier C API: a stable C ABI over every kvtier store (in-process RAM and
 * disk tiers, a store service, a cluster), for engines written in C, C++,
 * Rust, Go or anything else with a C FFI. docs/c-api.md has a quick start.
 *
 * Conventions
 * - Every call that can fail returns a kvtier_error; KVTIER_OK (0) is
 *   success. On failure, kvtier_last_error() returns a message for the
 *   calling thread's last failed call, and nothing was changed.
 * - A miss is never an error: kvtier_get_result.hit is 0 and miss_reason says
 *   why (not found, evicted, corrupt, foreign namespace, I/O error, timeout).
 *   A refused put is a result too (kvtier_put_result.refuse_reason).
 * - Block bytes are read from and written to the caller's memory; the
 *   library keeps no pointer to it after a call returns.
 * - Handles: a kvtier_store may be used from many threads at once; close it
 *   once, after every other call on it has returned.
 * - Keys are 16 bytes: the 128-bit key's high 64 bits then its low 64 bits,
 *   each most significant byte first, so printing the bytes in order as hex
 *   gives the key's usual 32-digit form (docs/block-keys.md).
 */
#ifndef KVTIER_KVTIER_H
#define KVTIER_KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVTIER_C_API_VERSION 1

/* Same values as kvtier::StatusCode. */
typedef enum kvtier_error {
  KVTIER_OK = 0,
  KVTIER_ERR_INVALID_ARGUMENT = 1,
  KVTIER_ERR_NOT_FOUND = 2,
  KVTIER_ERR_ALREADY_EXISTS = 3,
  KVTIER_ERR_OUT_OF_SPACE = 4,
  KVTIER_ERR_REJECTED = 5,
  KVTIER_ERR_CORRUPTION = 6,
  KVTIER_ERR_IO = 7,
  KVTIER_ERR_TIMEOUT = 8,
  KVTIER_ERR_UNAVAILABLE = 9,
  KVTIER_ERR_FAILED_PRECONDITION = 10,
  KVTIER_ERR_INTERNAL = 11,
  KVTIER_ERR_PERMISSION_DENIED = 12
} kvtier_error;

typedef enum kvtier_tier {
  KVTIER_TIER_NONE = 0,
  KVTIER_TIER_RAM = 1,
  KVTIER_TIER_DISK = 2
} kvtier_tier;

typedef enum kvtier_miss_reason {
  KVTIER_MISS_NONE = 0,
  KVTIER_MISS_NOT_FOUND = 1,
  KVTIER_MISS_EVICTED = 2,
  KVTIER_MISS_FOREIGN_NAMESPACE = 3,
  KVTIER_MISS_CORRUPT = 4,
  KVTIER_MISS_IO_ERROR = 5,
  KVTIER_MISS_TIMEOUT = 6
} kvtier_miss_reason;

typedef enum kvtier_refuse_reason {
  KVTIER_REFUSE_NONE = 0,
  KVTIER_REFUSE_NO_SPACE = 1,
  KVTIER_REFUSE_INDEX_FULL = 2,
  KVTIER_REFUSE_DISK_ERROR = 3,
  KVTIER_REFUSE_ADMISSION = 4,
  KVTIER_REFUSE_QUOTA = 5 /* the tenant is at its byte quota (store service) */
} kvtier_refuse_reason;

typedef enum kvtier_put_outcome {
  KVTIER_PUT_STORED = 0,
  KVTIER_PUT_DEDUPLICATED = 1,
  KVTIER_PUT_REFUSED = 2
} kvtier_put_outcome;

typedef enum kvtier_key_scheme {
  KVTIER_KEYS_XXH3_128 = 1,
  KVTIER_KEYS_SHA256 = 2
} kvtier_key_scheme;

typedef struct kvtier_store kvtier_store; /* opaque */

typedef struct kvtier_key {
  uint8_t bytes[16];
} kvtier_key;

/* Everything that must match for KV bytes to be reusable. Initialize with
 * kvtier_namespace_init(), then set the fields. Strings are copied by the
 * calls that take a namespace; NULL tenant_salt means none. */
typedef struct kvtier_namespace {
  const char* model_id;
  const char* model_revision;
  const char* tokenizer_id;
  const char* kv_dtype;
  const char* kv_layout;
  uint32_t tokens_per_block;
  uint32_t tp_size;
  uint32_t tp_rank;
  uint32_t pp_size;
  uint32_t pp_rank;
  const char* tenant_salt;
  uint32_t key_scheme; /* kvtier_key_scheme */
} kvtier_namespace;

typedef struct kvtier_put_result {
  int32_t outcome;       /* kvtier_put_outcome */
  int32_t tier;          /* kvtier_tier where it was stored */
  int32_t refuse_reason; /* kvtier_refuse_reason, when refused */
} kvtier_put_result;

typedef struct kvtier_get_result {
  int32_t hit;         /* 1: `length` bytes were written to the buffer */
  int32_t tier;        /* kvtier_tier that served it */
  int32_t miss_reason; /* kvtier_miss_reason, when not a hit */
  uint32_t length;
} kvtier_get_result;

typedef struct kvtier_match_result {
  size_t blocks;      /* leading keys present */
  size_t ram_blocks;  /* of those, in RAM */
  size_t disk_blocks; /* of those, on disk only */
} kvtier_match_result;

#define KVTIER_REASON_SLOTS 16
typedef struct kvtier_stats {
  uint64_t puts, dedups, put_bytes;
  uint64_t hits_ram, hits_disk, get_bytes;
  uint64_t misses[KVTIER_REASON_SLOTS];   /* indexed by kvtier_miss_reason */
  uint64_t refusals[KVTIER_REASON_SLOTS]; /* indexed by kvtier_refuse_reason */
  uint64_t evictions, demotions, promotions;
  uint64_t ram_slots, ram_used, ram_leased;
  uint64_t index_entries, index_capacity;
  uint64_t disk_bytes_written, disk_bytes_read;
  int32_t has_disk;
} kvtier_stats;

/* "MAJOR.MINOR.PATCH" of the library. */
const char* kvtier_version(void);
/* The message of this thread's last failed call ("" if none). Valid until the
 * thread's next call into the library. */
const char* kvtier_last_error(void);
const char* kvtier_error_name(int code);
const char* kvtier_tier_name(int tier);
const char* kvtier_miss_reason_name(int reason);
const char* kvtier_refuse_reason_name(int reason);

/* Opens a store from a URI: mem://?ram=64MiB, file:///path?ram=64MiB&disk=1GiB,
 * kvtier://host:port?token_file=PATH, etcd://host:port/prefix,
 * cluster://host:port,host:port (docs/store-uri.md). */
int kvtier_open(const char* uri, kvtier_store** out);
/* Closes the store (an in-process store writes its checkpoint). NULL is a
 * no-op. */
void kvtier_close(kvtier_store* store);

/* Defaults: tokens_per_block 16, tp/pp size 1 and rank 0, xxh3_128; strings NULL. */
void kvtier_namespace_init(kvtier_namespace* ns);
int kvtier_namespace_digest(const kvtier_namespace* ns, kvtier_key* out);
/* Keys of every full block of `tokens` (n_tokens / tokens_per_block of them).
 * *n_keys is set to that count; when it exceeds `capacity` the call fails
 * with KVTIER_ERR_INVALID_ARGUMENT and writes no key. */
int kvtier_block_keys(const kvtier_namespace* ns, const uint32_t* tokens, size_t n_tokens,
                      kvtier_key* keys, size_t capacity, size_t* n_keys);
/* 32 lowercase hex digits and a NUL. */
void kvtier_key_to_hex(const kvtier_key* key, char out[33]);

int kvtier_register_namespace(kvtier_store* store, const kvtier_namespace* ns, uint16_t* handle);

int kvtier_put(kvtier_store* store, uint16_t ns, const kvtier_key* key, const void* data,
               size_t length, kvtier_put_result* result);
int kvtier_get(kvtier_store* store, uint16_t ns, const kvtier_key* key, void* buffer,
               size_t capacity, kvtier_get_result* result);
/* keys[i] gets lengths[i] bytes at data[i]; results[i] says what happened. */
int kvtier_batch_put(kvtier_store* store, uint16_t ns, const kvtier_key* keys,
                     const void* const* data, const size_t* lengths, size_t n,
                     kvtier_put_result* results);
/* Reads keys[i] straight into buffers[i] (capacities[i] bytes, no overlap). */
int kvtier_batch_get_into(kvtier_store* store, uint16_t ns, const kvtier_key* keys,
                          void* const* buffers, const size_t* capacities, size_t n,
                          kvtier_get_result* results);
int kvtier_match_prefix(kvtier_store* store, uint16_t ns, const kvtier_key* keys, size_t n,
                        kvtier_match_result* result);
int kvtier_remove(kvtier_store* store, uint16_t ns, const kvtier_key* key, int* was_present);
int kvtier_pin(kvtier_store* store, uint16_t ns, const kvtier_key* keys, size_t n, uint64_t ttl_ms,
               size_t* pinned);
int kvtier_unpin(kvtier_store* store, uint16_t ns, const kvtier_key* keys, size_t n,
                 size_t* unpinned);
int kvtier_get_stats(kvtier_store* store, kvtier_stats* stats);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_KVTIER_H */
