// Writes the fuzzer's seed corpus: valid CONNECT / RANDOM_FILL pairs in the
// messages_fuzzer's input format (u32 split, u8 buffer-size exponent,
// first message, second message), and each message alone.
//   make_seeds <directory>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/messages.h"

namespace {

using namespace tutorial;

ConnectMessage Connect(uint32_t gpus, uint32_t nics, uint32_t buffers, size_t address_length,
                       uint64_t region_size) {
  ConnectMessage m;
  m.num_gpus = gpus;
  m.nics_per_gpu = nics;
  m.buffers_per_gpu = buffers;
  for (uint32_t i = 0; i < gpus * nics; ++i) {
    m.nic_addresses.push_back(std::vector<uint8_t>(address_length, static_cast<uint8_t>('a' + i)));
    for (uint32_t b = 0; b < buffers; ++b) {
      m.regions.push_back(RemoteRegion{0x7f0000000000ull + (i * buffers + b) * region_size,
                                       region_size, 100 + i * buffers + b});
    }
  }
  return m;
}

RandomFillRequest Request(uint64_t page_size, std::vector<uint32_t> indices) {
  RandomFillRequest r;
  r.cookie = 0xC00C1E;
  r.remote_context = 0xC0FFEE;
  r.seed = 7;
  r.page_size = page_size;
  r.page_indices = std::move(indices);
  return r;
}

void Write(const std::string& path, const std::vector<uint8_t>& first,
           const std::vector<uint8_t>& second, uint8_t size_exponent) {
  std::vector<uint8_t> bytes;
  uint32_t split = static_cast<uint32_t>(first.size());
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(split >> (8 * i)));
  bytes.push_back(size_exponent);
  bytes.insert(bytes.end(), first.begin(), first.end());
  bytes.insert(bytes.end(), second.begin(), second.end());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIRECTORY\n");
    return 2;
  }
  std::string dir = argv[1];
  // A client's session: its nonce and NIC 0 address (18 bytes, shm-like).
  const Session s{0x5E5510A, std::vector<uint8_t>(18, 's')};
  // 1 MiB buffers: exponent 8 (4096 << 8). shm-like 18-byte names,
  // tcp-like 16-byte and EFA-like 32-byte addresses.
  Write(dir + "/shm_pair", Encode(Connect(1, 2, 2, 18, 1 << 20), s),
        Encode(Request(4096, {3, 1, 200, 0, 255}), s), 8);
  Write(dir + "/tcp_pair", Encode(Connect(2, 2, 2, 16, 1 << 20), s),
        Encode(Request(65536, {0, 15, 7}), s), 8);
  Write(dir + "/efa_pair", Encode(Connect(8, 4, 2, 32, 64 << 20), s),
        Encode(Request(65536, {999, 0, 512}), s), 14);
  Write(dir + "/small_region", Encode(Connect(1, 1, 1, 18, 8192), s),
        Encode(Request(4096, {0, 1}), s), 8);
  Write(dir + "/connect_only", Encode(Connect(1, 2, 2, 18, 1 << 20), s), {}, 8);
  Write(dir + "/request_only", {}, Encode(Request(8, {0}), s), 0);
  Write(dir + "/reject", Encode(RejectMessage{"the server says no"}, Session{s.nonce, {}}), {}, 8);
  Write(dir + "/probe", EncodeEmpty(MessageType::kProbe, s), {}, 8);
  Write(dir + "/challenge", Encode(ChallengeMessage{0xC00C1E}, Session{s.nonce, {}}), {}, 8);
  return 0;
}
