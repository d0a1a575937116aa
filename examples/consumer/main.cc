// The C++ interface from the installed headers: kvtier::open_store and KvStore.
#include <kvtier/kv_store.h>

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  auto store = kvtier::open_store("mem://?ram=16MiB");
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().to_string().c_str());
    return 1;
  }
  kvtier::kv::Namespace ns;
  ns.model_id = "my-model";
  ns.model_revision = "v1";
  ns.tokenizer_id = "my-tokenizer";
  ns.kv_dtype = "bf16";
  ns.kv_layout = "NHD";
  auto h = (*store)->register_namespace(ns);
  if (!h.ok()) return 1;
  std::vector<uint32_t> tokens(48);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  auto keys = kvtier::kv::chain_block_keys(ns.scheme, ns.digest(), ns.tokens_per_block, tokens);
  std::vector<std::byte> block(8192, std::byte{42}), back(8192);
  for (const auto& k : keys) {
    auto put = (*store)->put(*h, k, block);
    if (!put.ok() || !put->stored()) return 1;
  }
  auto m = (*store)->match_prefix(*h, keys);
  auto got = (*store)->get(*h, keys[2], back);
  const bool ok = m.ok() && m->blocks == keys.size() && got.ok() && got->hit &&
                  std::memcmp(block.data(), back.data(), block.size()) == 0;
  std::printf("kvtier %s (C++): matched %zu of %zu blocks, bytes %s\n", kvtier::library_version(),
              m.ok() ? m->blocks : 0, keys.size(), ok ? "identical" : "DIFFERENT");
  return ok ? 0 : 1;
}
