#include "bench/study_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "bench/study_metrics.h"
#include "bench/study_run.h"

namespace kvtier::bench {
namespace study_run {

Status Run::setup() {
  if (o_.prefill_replicas == 0 || o_.decode_replicas == 0) {
    return Status::invalid_argument("at least one prefill and one decode replica are needed");
  }
  if (w_.block_tokens == 0) return Status::invalid_argument("workload has no block size");
  block_bytes_ = static_cast<uint32_t>(w_.block_tokens * engine_.stored_kv_bytes_per_token());
  res_.block_bytes = block_bytes_;
  total_ = w_.request_count();
  for (const auto& g : w_.length_groups) res_.group_labels.push_back(g.label);

  const auto ns =
      kv::Namespace::of_model("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", "modeled", "qwen3",
                              w_.block_tokens, "bf16", "modeled:" + o_.profile.name);
  ns_digest_ = ns.digest();
  keys_.reserve(w_.sessions.size());
  known_first_.reserve(w_.sessions.size());
  for (const Session& session : w_.sessions) {
    keys_.emplace_back(ns.scheme, ns_digest_, session);
    known_first_.emplace_back(keys_.back().chain_count());
  }

  const uint64_t hbm_tokens = o_.hbm_pool_tokens ? o_.hbm_pool_tokens : o_.profile.hbm_pool_tokens;
  const uint64_t hbm_blocks = static_cast<uint64_t>(
      std::llround(static_cast<double>(hbm_tokens) * o_.profile.token_scale / w_.block_tokens));
  prefills_.resize(o_.prefill_replicas);
  busy_.resize(o_.prefill_replicas);
  for (auto& p : prefills_) {
    if (spec_.hbm_pool) p.pool = std::make_unique<engine::HbmPrefixPool>(hbm_blocks);
    p.worker = std::make_unique<serve::ReplicaWorker>();
  }
  res_.replica_threads = static_cast<uint32_t>(prefills_.size());
  decode_budget_.assign(o_.decode_replicas, 0);
  serve::RouterOptions ro;
  ro.spill_margin = o_.spill_margin_tokens;
  router_ = std::make_unique<serve::SoftStickyRouter>(o_.prefill_replicas, o_.decode_replicas, ro);
  res_.pd_transfer = pd_transfer_mode_name(o_.pd_transfer);
  KVTIER_RETURN_IF_ERROR(setup_pd_transfer());

  if (!spec_.store) return Status::ok_status();
  return setup_store(ns);
}

Status Run::setup_pd_transfer() {
  if (o_.pd_transfer != PdTransferMode::kLoopback) return Status::ok_status();
  // The receivers accept exactly what this workload can send: blocks of
  // block_bytes_, as many as its longest prompt has.
  size_t max_blocks = 0;
  for (const auto& session : keys_) {
    for (size_t t = 0; t < session.turn_count(); ++t) {
      max_blocks = std::max(max_blocks, session.turn(t).size());
    }
  }
  serve::KvReceiverOptions ro;
  ro.ns_digest = ns_digest_;
  ro.limits.max_blocks = static_cast<uint32_t>(std::max<size_t>(max_blocks, 1));
  ro.limits.max_block_bytes = block_bytes_;
  ro.limits.max_payload_bytes = uint64_t{ro.limits.max_blocks} * block_bytes_;
  for (uint32_t d = 0; d < o_.decode_replicas; ++d) {
    auto rx = serve::KvTransferReceiver::start(ro);
    if (!rx.ok()) {
      return Status(rx.status().code(), "PD transfer receiver of decode replica " +
                                            std::to_string(d) + ": " + rx.status().message() +
                                            " (--pd-transfer modeled runs without sockets)");
    }
    receivers_.push_back(std::move(*rx));
  }
  for (uint32_t p = 0; p < o_.prefill_replicas; ++p) {
    senders_.push_back(std::make_unique<serve::KvTransferSender>());
    for (const auto& rx : receivers_) senders_.back()->add_receiver(rx->port(), rx->token());
  }
  return Status::ok_status();
}

void Run::start_pd_transfer(size_t p, uint32_t id, std::span<const kv::Key128> keys) {
  Inflight& f = inflight_[id];
  if (o_.pd_transfer == PdTransferMode::kModeled) {
    f.modeled_transfer_s = engine_.pd_transfer_seconds(f.req->prompt_tokens);
    return;
  }
  serve::KvTransferSender* sender = senders_[p].get();
  const uint16_t port = receivers_[f.decode]->port();
  f.transfer = prefills_[p].worker->submit([this, sender, port, id, keys] {
    return TransferJob(sender->send(port, id, ns_digest_, keys, block_bytes_));
  });
}

Result<double> Run::finish_pd_transfer(uint32_t id, double charge_scale) {
  Inflight& f = inflight_[id];
  const TraceRequest& r = *f.req;
  if (o_.pd_transfer == PdTransferMode::kModeled) {
    res_.network_bytes += uint64_t{r.prompt_tokens} * engine_.stored_kv_bytes_per_token();
    res_.pd_charged_s += f.modeled_transfer_s;
    return f.modeled_transfer_s;
  }
  TransferJob t = f.transfer.get();
  if (!t.ok()) {
    return Status(t.status().code(), "PD transfer of request " + std::to_string(id) +
                                         " from prefill " + std::to_string(f.prefill) +
                                         " to decode " + std::to_string(f.decode) + ": " +
                                         t.status().message());
  }
  ++res_.pd_frames;
  res_.network_bytes += t->frame_bytes;
  res_.pd_payload_bytes += t->payload_bytes;
  res_.pd_wall_s += t->wall_s;
  const double s = t->wall_s * charge_scale;
  res_.pd_charged_s += s;
  return s;
}

std::span<const kv::Key128> Run::keys_of(const TraceRequest& r) const {
  return keys_[r.session].turn(r.turn);
}

void Run::accept_issues(const std::vector<Issue>& issues, double now) {
  for (const auto& is : issues) {
    pending_.push_back(is);
    push(std::max(is.at_s, now), EvKind::kArrive, static_cast<uint32_t>(pending_.size() - 1));
  }
}

void Run::dispatch(const TraceRequest* req, double now) {
  ++in_flight_;
  Inflight f;
  f.req = req;
  f.dispatch_s = now;
  if (!started_any_) {
    started_any_ = true;
    res_.first_start_s = now;
  }
  std::vector<double> scores;
  for (const auto& p : prefills_) scores.push_back(p.score);
  f.prefill = router_->route_prefill(req->session, scores);
  f.decode = router_->route_decode(decode_budget_);
  router_->record_pair(f.prefill, f.decode);
  decode_budget_[f.decode] += o_.profile.real_tokens(req->output_tokens);
  auto& p = prefills_[f.prefill];
  inflight_.push_back(std::move(f));
  p.score += o_.profile.real_tokens(req->prompt_tokens);
  p.queue.push_back(static_cast<uint32_t>(inflight_.size() - 1));
}

Result<PrefixLoad> Run::load_from_store(PrefillReplica& p, std::span<const kv::Key128> keys,
                                        size_t hbm, double scale) {
  PrefixLoad out;
  out.hbm = out.cached = out.load_from = hbm;
  if (!p.connector) return out;
  engine::LoadStartChooser choose;
  if (o_.load_policy == LoadPolicy::kRace) {
    const double compute_per_block = engine_.prefill_seconds(w_.block_tokens, 0);
    // By value: compute_per_block ends with this block, before the load
    // (on the replica's thread) calls the chooser.
    choose = [compute_per_block, hbm, &p](const kv::MatchResult& m) {
      return engine::plan_compute_load_race(m.tiers, hbm, m.blocks, compute_per_block, p.load_rates)
          .load_from;
    };
  }
  // On the replica's thread; the loop waits, since the load's time decides
  // when the replica is free. `choose` reads the replica's rate tracker,
  // which nothing else touches meanwhile.
  engine::KvConnector* connector = p.connector.get();
  auto load = p.worker
                  ->submit([connector, keys, hbm, &choose] {
                    return connector->load_prefix(keys, hbm, choose);
                  })
                  .get();
  if (!load.ok()) return load.status();
  out.store_matched = load->store_matched;
  out.load_s = out.load_wall_s = load->wall_s;
  double ram_s = load->ram_wall_s, disk_s = load->disk_wall_s;
  if (o_.modeled_store) {
    ram_s =
        modeled_seconds(static_cast<double>(load->bytes - load->disk_bytes), load->from_ram,
                        o_.modeled_store->ram_load_bytes_per_s, o_.modeled_store->ram_ops, scale);
    disk_s = modeled_seconds(static_cast<double>(load->disk_bytes), load->from_disk,
                             modeled_disk_load_rate(), modeled_disk_load_ops(), scale);
    out.load_s = o_.modeled_store->lookup_s / scale + ram_s + disk_s;
  }
  out.disk_s = disk_s;
  p.load_rates.observe(kv::Tier::kRam, load->from_ram, ram_s * scale);
  p.load_rates.observe(kv::Tier::kDisk, load->from_disk, disk_s * scale);
  res_.verify_failures += load->verify_failures;
  res_.store_load_bytes += load->bytes;
  if (o_.window_s > 0) {
    const double now_s = static_cast<double>(virtual_now_ns_.load(std::memory_order_relaxed)) / 1e9;
    const auto window = static_cast<size_t>(now_s / o_.window_s);
    auto& by_window = res_.store_load_bytes_by_window;
    if (by_window.size() <= window) by_window.resize(window + 1, 0);
    by_window[window] += load->bytes;
  }
  res_.store_disk_load_bytes += load->disk_bytes;
  res_.store_disk_load_wall_s += load->disk_wall_s;
  res_.store_read_wall_s += load->ram_wall_s + load->disk_wall_s;
  ++res_.store_lookups;
  if (load->loaded > 0) {
    ++res_.store_load_events;
    res_.store_hit_blocks += load->loaded;
    res_.store_blocks_from_ram += load->from_ram;
    res_.store_blocks_from_disk += load->from_disk;
    out.cached = hbm + load->loaded;
    out.load_from = load->load_from;
  }
  return out;
}

void Run::count_served_blocks(const TraceRequest& r, std::span<const kv::Key128> keys,
                              const PrefixLoad& load) {
  const size_t n = keys.size();
  const size_t hbm = load.hbm;
  // Blocks computed alongside the load (race) and the prefix usable after it.
  const size_t front = load.load_from - hbm;
  const size_t prefix = load.load_from + (load.cached - hbm);
  res_.race_recomputed_blocks += front;
  res_.prompt_blocks += n;
  res_.hbm_hit_blocks += hbm;
  res_.computed_blocks += n - load.cached;
  // A block's first session never changes once set, so the blocks this
  // session's chain already touched take it from the session's own list;
  // only the others look it up (or are entered) in the run-wide map.
  std::vector<uint32_t>& known = known_first_[r.session][keys_[r.session].chain_of(r.turn)];
  constexpr size_t kAhead = 8;  // cold slots whose loads overlap
  for (size_t i = 0; i < n; ++i) {
    const bool served = i < hbm || (i >= load.load_from && i < prefix);
    if (i < known.size()) {
      if (served) (known[i] == r.session ? res_.same_session_blocks : res_.cross_session_blocks)++;
      continue;
    }
    // A growth moves every slot; prefetching the old array then only wastes
    // a load, so the prefetch needs no care about it.
    if (i + kAhead < n) first_session_.prefetch(keys[i + kAhead]);
    auto [first, inserted] = first_session_.emplace(keys[i], r.session);
    known.push_back(*first);
    if (served && !inserted) {
      (*first == r.session ? res_.same_session_blocks : res_.cross_session_blocks)++;
    }
  }
  const uint64_t cached_tokens =
      std::min<uint64_t>(static_cast<uint64_t>(load.cached) * w_.block_tokens, r.prompt_tokens);
  res_.kv_served_tokens += o_.profile.real_tokens(cached_tokens);
  const uint64_t hbm_tokens =
      std::min<uint64_t>(static_cast<uint64_t>(hbm) * w_.block_tokens, cached_tokens);
  res_.store_served_tokens += o_.profile.real_tokens(cached_tokens - hbm_tokens);
  res_.store_wall_s += load.load_wall_s;
  res_.store_load_wall_s += load.load_wall_s;
}

Status Run::after_prefill(size_t pi, uint32_t id, std::span<const kv::Key128> keys,
                          size_t store_matched, double prefill_end, double scale) {
  auto& p = prefills_[pi];
  auto& f = inflight_[id];
  // Blocks the store lacks are saved once computed (or, for HBM hits whose
  // store copy is gone, from the replica's pool): write-behind, on the
  // replica's thread, while the loop goes on; booked at its next load.
  if (p.connector && store_matched < keys.size()) {
    engine::KvConnector* connector = p.connector.get();
    auto rest = keys.subspan(store_matched);
    // The blocks exist from prefill_end: the store's lease clock reads that
    // time during the save, whatever the event loop's time is meanwhile.
    const auto at_ns = static_cast<uint64_t>(prefill_end * 1e9);
    p.save = p.worker->submit([connector, rest, at_ns] {
      save_time_ns = at_ns;
      auto r = connector->save(rest);
      save_time_ns.reset();
      return r;
    });
    p.save_after = prefill_end;
    if (!o_.overlap_replicas) KVTIER_RETURN_IF_ERROR(finish_save(p, scale));
  }
  // The KV leaves for the decode replica once prefill is done; the prefill
  // replica's GPU is free at prefill_end (the transfer does not hold it).
  // The first token cannot come before prefill_end + one decode step: the
  // transfer is waited for then.
  start_pd_transfer(pi, id, keys);
  if (!o_.overlap_replicas && f.transfer.valid()) f.transfer.wait();
  // The new blocks exist from prefill_end on: the save must have reached
  // the store before anything later happens (kSaveDone is queued first).
  if (p.save) push(prefill_end, EvKind::kSaveDone, static_cast<uint32_t>(pi));
  push(prefill_end, EvKind::kPrefillFree, static_cast<uint32_t>(pi));
  push(prefill_end + engine_.decode_seconds(1), EvKind::kTransferDone, id);
  return Status::ok_status();
}

Status Run::start_prefill(size_t pi, double now) {
  auto& p = prefills_[pi];
  if (p.busy || p.queue.empty()) return Status::ok_status();
  const uint32_t id = p.queue.front();
  p.queue.pop_front();
  p.busy = true;
  p.current = id;
  auto& f = inflight_[id];
  const TraceRequest& r = *f.req;
  const auto& keys = keys_of(r);

  const size_t hbm = p.pool ? p.pool->match_prefix(keys) : 0;
  const double scale = charge_scale();
  // This replica's earlier save comes before its load (one store path per
  // replica): book it now.
  KVTIER_RETURN_IF_ERROR(finish_save(p, scale));
  auto load = load_from_store(p, keys, hbm, scale);
  if (!load.ok()) return load.status();
  count_served_blocks(r, keys, *load);
  if (p.pool) p.pool->insert(keys);
  res_.store_charged_s += load->load_s * scale;

  const size_t front = load->load_from - hbm;
  const size_t prefix = load->load_from + (load->cached - hbm);
  const uint64_t prefix_tokens =
      std::min<uint64_t>(static_cast<uint64_t>(prefix) * w_.block_tokens, r.prompt_tokens);
  const uint64_t front_tokens = std::min<uint64_t>(front * w_.block_tokens, prefix_tokens);
  // The load starts once the replica's earlier saves are out of the way.
  const double load_start =
      load->load_s > 0 && load->cached > hbm ? std::max(now, p.save_free_at) : now;
  // With shared_disk, the replicas' disk reads queue on the one volume (or
  // link): this load's disk part waits for the reads booked before it.
  double load_s = load->load_s * scale;
  if (o_.shared_disk && load->disk_s > 0) {
    const double disk_start = std::max(load_start, disk_free_at_);
    disk_free_at_ = disk_start + load->disk_s * scale;
    load_s += disk_start - load_start;
    res_.disk_queue_s += disk_start - load_start;
  }
  // The front's recompute starts at once, the load once the saves are out of
  // the way; the rest of the prompt is computed when both are done.
  const double front_compute = engine_.prefill_seconds(front_tokens, hbm * w_.block_tokens);
  const double prefill = engine_.prefill_seconds(r.prompt_tokens - prefix_tokens, prefix_tokens);
  const double prefill_end = std::max(now + front_compute, load_start + load_s) + prefill;
  f.prefill_end = prefill_end;
  return after_prefill(pi, id, keys, load->store_matched, prefill_end, scale);
}

Status Run::on_transfer_done(uint32_t id) {
  auto& f = inflight_[id];
  const double scale = charge_scale();
  auto transfer_s = finish_pd_transfer(id, scale);
  if (!transfer_s.ok()) return transfer_s.status();
  const double first_token = f.prefill_end + *transfer_s + engine_.decode_seconds(1);
  f.ttft_s = first_token - f.dispatch_s;
  const uint32_t out = std::max<uint32_t>(f.req->output_tokens, 1);
  push(first_token + engine_.decode_seconds(out - 1), EvKind::kDecodeDone, id);
  return Status::ok_status();
}

void Run::on_decode_done(uint32_t id, double now) {
  auto& f = inflight_[id];
  --in_flight_;
  decode_budget_[f.decode] -= o_.profile.real_tokens(f.req->output_tokens);
  ++res_.completed;
  res_.last_end_s = std::max(res_.last_end_s, now);
  res_.ttft_s.push_back(f.ttft_s);
  res_.ttft_group.push_back(f.req->length_group);
  busy_[f.prefill].emplace_back(f.dispatch_s, now);
  accept_issues(sched_.on_complete(*f.req, now), now);
  if (progress_ && (res_.completed % 64 == 0 || res_.completed == total_)) {
    progress_({res_.completed, total_});
  }
}

Result<CaseResult> Run::run() {
  const auto t0 = std::chrono::steady_clock::now();
  if (auto st = setup(); !st.ok()) return st;
  accept_issues(sched_.start(0.0), 0.0);
  while (!events_.empty()) {
    const Event ev = events_.top();
    events_.pop();
    virtual_now_ns_.store(static_cast<uint64_t>(ev.t * 1e9), std::memory_order_relaxed);
    switch (ev.kind) {
      case EvKind::kArrive: {
        const TraceRequest* req = pending_[ev.idx].request;
        if (in_flight_ < o_.max_in_flight) {
          dispatch(req, ev.t);
          const size_t p = inflight_.back().prefill;
          if (auto st = start_prefill(p, ev.t); !st.ok()) return st;
        } else {
          client_queue_.push_back(req);
        }
        break;
      }
      case EvKind::kPrefillFree: {
        auto& p = prefills_[ev.idx];
        p.busy = false;
        p.score -= o_.profile.real_tokens(inflight_[p.current].req->prompt_tokens);
        if (auto st = start_prefill(ev.idx, ev.t); !st.ok()) return st;
        break;
      }
      case EvKind::kSaveDone: {
        if (auto st = finish_save(prefills_[ev.idx], charge_scale()); !st.ok()) return st;
        break;
      }
      case EvKind::kTransferDone:
        if (auto st = on_transfer_done(ev.idx); !st.ok()) return st;
        break;
      case EvKind::kDecodeDone: {
        on_decode_done(ev.idx, ev.t);
        while (in_flight_ < o_.max_in_flight && !client_queue_.empty()) {
          const TraceRequest* req = client_queue_.front();
          client_queue_.pop_front();
          dispatch(req, ev.t);
          if (auto st = start_prefill(inflight_.back().prefill, ev.t); !st.ok()) return st;
        }
        break;
      }
    }
  }
  if (!sched_.exhausted()) {
    return Status::internal("the session scheduler stopped issuing before the workload ended (" +
                            std::to_string(res_.completed) + " of " + std::to_string(total_) +
                            " requests)");
  }
  // The last saves are booked; then every replica thread is idle.
  const double scale = charge_scale();
  for (auto& p : prefills_) KVTIER_RETURN_IF_ERROR(finish_save(p, scale));
  std::vector<const std::vector<std::pair<uint64_t, uint64_t>>*> intervals;
  for (auto& p : prefills_) intervals.push_back(&p.worker->busy());
  res_.replica_overlap_wall_s = serve::overlap_seconds(intervals);
  res_.throughput_rps = throughput_rps(res_.completed, res_.first_start_s, res_.last_end_s);
  for (const auto& b : busy_) res_.busy_union_s += union_length(b);
  res_.gross_busy_saved_ratio = gross_busy_time_saved(
      res_.store_served_tokens, o_.profile.prefill_tokens_per_s, res_.busy_union_s);
  const auto& rs = router_->stats();
  res_.later_turns = rs.later_turns;
  res_.stayed_turns = rs.stayed;
  res_.pair_counts = rs.pair_counts;
  book_store_counters();
  for (const auto& rx : receivers_) {
    const auto s = rx->stats();
    res_.pd_received_bytes += s.frame_bytes;
    res_.pd_blocks_verified += s.blocks_verified;
    res_.verify_failures += s.rejected_frames + s.truncated;
  }
  res_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cluster_.reset();
  nodes_.clear();
  return res_;
}

}  // namespace study_run

Result<CaseResult> run_study_case(const Workload& workload, SessionScheduler& scheduler,
                                  const std::string& protocol, StudyCase c,
                                  const StudyOptions& options,
                                  const std::function<void(const RunProgress&)>& progress) {
  study_run::Run run(workload, scheduler, protocol, c, options, progress);
  return run.run();
}

}  // namespace kvtier::bench
