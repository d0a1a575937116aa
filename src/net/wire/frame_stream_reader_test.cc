// FrameStreamReader over a real loopback socket.
#include "net/wire/frame_stream_reader.h"

#include <gtest/gtest.h>

#include <asio.hpp>
#include <vector>

#include "common/crc32c.h"
#include "net/wire/protocol.h"

namespace kvtier::net {
namespace {

// ---- FrameStreamReader ----------------------------------------------------------------------

// A data section scattered over more destination parts than one read takes,
// arriving together with the next frame: every byte lands in its part, in
// order, and the next frame is intact.
TEST(FrameStreamReader, ScattersManyPartsAndKeepsTheNextFrame) {
  asio::io_context io;
  asio::ip::tcp::acceptor acc(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::ip::tcp::socket writer(io), reader_sock(io);
  writer.connect(acc.local_endpoint());
  acc.accept(reader_sock);

  constexpr int kParts = 100;
  BatchGetResponse resp;
  std::vector<std::vector<std::byte>> blobs(kParts);
  std::vector<ByteView> src;
  for (int i = 0; i < kParts; ++i) {
    blobs[i].resize(200 + i);
    for (size_t j = 0; j < blobs[i].size(); ++j) blobs[i][j] = std::byte(i * 7 + j);
    resp.results.push_back(
        {true, kv::Tier::kRam, kv::MissReason::kNone, static_cast<uint32_t>(blobs[i].size())});
    src.push_back(blobs[i]);
  }
  auto f1 = encode_message_frame(resp, 1, src);
  auto f2 = encode_message_frame(StatsRequest{}, 2);
  ASSERT_TRUE(f1.ok() && f2.ok());
  std::vector<std::byte> stream = *f1;
  stream.insert(stream.end(), f2->begin(), f2->end());
  asio::write(writer, asio::buffer(stream));              // all at once: reads see both frames
  writer.shutdown(asio::ip::tcp::socket::shutdown_send);  // a reader that loses bytes sees EOF

  std::vector<std::vector<std::byte>> dst(kParts);
  std::vector<MutableByteView> views;
  for (int i = 0; i < kParts; ++i) {
    dst[i].resize(blobs[i].size());
    views.push_back(dst[i]);
  }
  FrameStreamReader r;
  Status head, dest, data, next;
  Frame first, second;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::error_code ec;
        NetStream reader_stream(std::move(reader_sock));
        head = co_await r.read_head(reader_stream, ec);
        if (!head.ok() || r.decoder().state() != FrameDecoder::State::kData) co_return;
        dest = r.set_data_destination(views);
        data = co_await r.read_data(reader_stream, ec);
        first = r.decoder().take_frame();
        next = co_await r.read_head(reader_stream, ec);
        second = r.decoder().take_frame();
      },
      asio::detached);
  io.run();
  ASSERT_TRUE(head.ok()) << head.to_string();
  ASSERT_TRUE(dest.ok()) << dest.to_string();
  ASSERT_TRUE(data.ok()) << data.to_string();
  EXPECT_EQ(first.header.type, MessageType::kBatchGetResponse);
  EXPECT_TRUE(first.data.empty());  // it all went to the parts
  for (int i = 0; i < kParts; ++i) EXPECT_EQ(dst[i], blobs[i]) << i;
  ASSERT_TRUE(next.ok()) << next.to_string();
  EXPECT_EQ(second.header.type, MessageType::kStatsRequest);
  EXPECT_EQ(second.header.request_id, 2u);
  EXPECT_EQ(r.bytes_read(), stream.size());
}

}  // namespace
}  // namespace kvtier::net
