// EFA's rules that no loopback provider enforces (docs/running-on-p5.md),
// pinned where our code makes the choice. Each test names the rule and
// where libfabric's EFA provider states it (ofiwg/libfabric, v1.22-v2.6).
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_ext.h>

#include <cstring>
#include <memory>

#include "common/device_rdma.h"
#include "common/errors.h"
#include "common/network.h"
#include "harness/recovery.h"
#include "harness/recovery_nic.h"

namespace tutorial {
namespace {

// libfabric's util event queue (include/ofi_util.h, UTIL_FLAG_ERROR, 1.17
// to 2.6) takes this flag on fi_eq_write to queue an error entry, as the
// efa provider does for its internal errors.
constexpr uint64_t kUtilFlagError = 1ULL << 60;

// prov/efa/src/rdm/efa_rdm_util.c (use_device_rdma): below API 1.18 the
// efa fabric keeps device RDMA off on p5 hardware, so FI_HMEM is refused.
// We ask for the newest API our headers know, capped by the library's.
TEST(EfaRulesTest, ApiVersionIsTheHeadersCappedByTheLibrary) {
  EXPECT_EQ(ApiVersionFor(FI_VERSION(2, 6), FI_VERSION(2, 6)), FI_VERSION(2, 6));
  EXPECT_EQ(ApiVersionFor(FI_VERSION(2, 6), FI_VERSION(1, 17)), FI_VERSION(1, 17));
  EXPECT_EQ(ApiVersionFor(FI_VERSION(1, 17), FI_VERSION(2, 6)), FI_VERSION(1, 17));
  EXPECT_GE(ApiVersionFor(FI_VERSION(2, 0), FI_VERSION(2, 6)), FI_VERSION(1, 18));
  EXPECT_EQ(RequestedApiVersion(),
            ApiVersionFor(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), fi_version()));
}

// prov/efa/src/efa_prov.c: from 2.1 the efa-direct entries come first with
// the same domain names; we name the `efa` fabric (efa.h: EFA_FABRIC_NAME).
TEST(EfaRulesTest, HintsNameTheEfaFabric) {
  FiInfoPtr hints = MakeHints(FabricChoice{"efa", MemoryKind::kHost, ""});
  ASSERT_NE(hints->fabric_attr->name, nullptr);
  EXPECT_STREQ(hints->fabric_attr->name, "efa");
  EXPECT_STREQ(hints->fabric_attr->prov_name, "efa");
  // Other providers' fabrics are not named.
  FiInfoPtr shm = MakeHints(FabricChoice{"shm", MemoryKind::kHost, ""});
  EXPECT_EQ(shm->fabric_attr->name, nullptr);
}

// No shm inside efa: hints with FI_REMOTE_COMM but without
// FI_LOCAL_COMM make efa_user_info.c clear FI_LOCAL_COMM, and then the efa
// domain opens no shm provider (efa_domain.c in 2.1, efa_shm.c in 2.6):
// no shm endpoint per NIC, no shm copy of every registration. shm's own
// hints are left alone (it is local communication only).
TEST(EfaRulesTest, EfaHintsAskForRemotePeersOnlySoEfaOpensNoShm) {
  FiInfoPtr efa = MakeHints(FabricChoice{"efa", MemoryKind::kHost, ""});
  EXPECT_TRUE(efa->caps & FI_REMOTE_COMM);
  EXPECT_FALSE(efa->caps & FI_LOCAL_COMM);
  FiInfoPtr cuda = MakeHints(FabricChoice{"efa", MemoryKind::kCuda, ""});
  EXPECT_TRUE(cuda->caps & FI_REMOTE_COMM);
  EXPECT_FALSE(cuda->caps & FI_LOCAL_COMM);
  FiInfoPtr shm = MakeHints(FabricChoice{"shm", MemoryKind::kHost, ""});
  EXPECT_FALSE(shm->caps & (FI_REMOTE_COMM | FI_LOCAL_COMM));
}

// An efa endpoint has no fi_setname (fi_no_setname: prov/efa/src/rdm/
// efa_rdm_ep_fiops.c and, for efa-direct, prov/efa/src/efa_ep.c, v2.1.0 and
// v2.6.0), and its address holds the QP number: an endpoint opened again
// gets a new address. So a rebuild over efa never tries to keep the old
// one, and the front door, whose address the clients hold, is not rebuilt
// after a flood there; shm and tcp take their old names back.
TEST(EfaRulesTest, AnEndpointOpenedAgainOverEfaGetsANewAddress) {
  EXPECT_FALSE(KeepsAddressOnRebuild("efa"));
  EXPECT_EQ(FloodOverSeconds("efa"), 0);
  EXPECT_TRUE(KeepsAddressOnRebuild("shm"));
  EXPECT_TRUE(KeepsAddressOnRebuild("tcp"));
  EXPECT_TRUE(KeepsAddressOnRebuild("tcp;ofi_rxm"));
}

// The registration modes EFA requires (efa_user_info.c), GPU
// memory with FI_MR_HMEM, per-operation scratch space (FI_CONTEXT2 for
// efa-direct), and the chapter's threading level.
TEST(EfaRulesTest, HintsCarryEfaModesAndTheChaptersThreading) {
  FiInfoPtr series = MakeHints(FabricChoice{"efa", MemoryKind::kHost, ""});
  uint64_t required = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  EXPECT_EQ(series->domain_attr->mr_mode & required, required);
  EXPECT_TRUE(series->mode & FI_CONTEXT2);
  EXPECT_EQ(series->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(series->domain_attr->threading, FI_THREAD_SAFE);  // the series'
  EXPECT_FALSE(series->caps & FI_HMEM);

  EditHints ours = [](fi_info& hints) { hints.domain_attr->threading = FI_THREAD_DOMAIN; };
  FiInfoPtr cuda = MakeHints(FabricChoice{"efa", MemoryKind::kCuda, ""}, ours);
  EXPECT_TRUE(cuda->caps & FI_HMEM);
  EXPECT_TRUE(cuda->domain_attr->mr_mode & FI_MR_HMEM);
  EXPECT_EQ(cuda->domain_attr->threading, FI_THREAD_DOMAIN);
}

// The series: a remote write is told by the completion's
// flags; the efa fabric can leave a stale op_context in the entry.
TEST(EfaRulesTest, RemoteWritesAreToldByFlagsNotByANullContext) {
  int stale = 0;
  fi_cq_data_entry remote_write{};
  remote_write.op_context = &stale;  // not ours to dereference
  remote_write.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
  remote_write.data = 0x1234;
  EXPECT_TRUE(IsRemoteWrite(remote_write));

  fi_cq_data_entry data_only{};  // a provider that sets only the data flag
  data_only.op_context = &stale;
  data_only.flags = FI_REMOTE_CQ_DATA;
  EXPECT_TRUE(IsRemoteWrite(data_only));

  fi_cq_data_entry our_write{};
  our_write.op_context = &stale;
  our_write.flags = FI_RMA | FI_WRITE;
  EXPECT_FALSE(IsRemoteWrite(our_write));

  fi_cq_data_entry receive{};  // a message that carried CQ data
  receive.op_context = &stale;
  receive.flags = FI_MSG | FI_RECV | FI_REMOTE_CQ_DATA;
  EXPECT_FALSE(IsRemoteWrite(receive));
}

// Register with FI_SEND | FI_RECV as well as the RMA access bits
// (efa_mr.c maps them to the device's local access rights).
TEST(EfaRulesTest, RegistrationsAllowMessagesAndRma) {
  uint64_t needed = FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE;
  EXPECT_EQ(kRegistrationAccess & needed, needed);
}

// efa_base_ep.c (efa_base_ep_write_eq_error): without a bound event queue
// the efa fabric abort()s on errors of its internal operations. Every
// Network binds one, and reports what it says in one line. shm's event
// queue is libfabric's own (util) one, which lets the test write the error
// the provider would.
TEST(EfaRulesTest, TheEventQueueIsBoundAndItsErrorsReported) {
  auto infos = FindNics(FabricChoice{"shm", MemoryKind::kHost, ""});
  Network net(*infos[0]);
  ASSERT_NE(Recovery::EventQueueForTesting(net), nullptr);
  EXPECT_EQ(Recovery::TakeEventError(net), "");
  fi_eq_err_entry err{};
  err.err = FI_EIO;
  ssize_t written = fi_eq_write(Recovery::EventQueueForTesting(net), FI_NOTIFY, &err, sizeof(err),
                                kUtilFlagError);
  ASSERT_EQ(written, static_cast<ssize_t>(sizeof(err)));
  std::string reported = Recovery::TakeEventError(net);
  EXPECT_NE(reported.find(fi_strerror(FI_EIO)), std::string::npos) << reported;
  EXPECT_NE(reported.find(net.name()), std::string::npos) << reported;
  EXPECT_EQ(Recovery::TakeEventError(net), "");
}

// GPUDirect or a loud refusal. No machine here has an EFA device
// or GPUDirect, and simnic moves host memory only, so this fake plays efa's
// fi_setopt/fi_getopt: it answers as prov/efa/src/rdm/efa_rdm_ep_fiops.c
// (efa_rdm_ep_setopt, efa_rdm_ep_getopt; v2.1.0 and v2.6.0) does on a host
// with or without peer-to-peer access to GPU memory.
struct FakeEfaEndpoint {
  bool p2p_supported_by_device = true;  // nvidia-peermem or dma-buf present
  bool rdma_read = true;                // device RDMA on, RDMA read capable
  bool rdma_write = true;               // and RDMA write capable
  int p2p_set = -1;                     // what the application set
  int sets = 0, gets = 0;

  EndpointOptions Options() {
    EndpointOptions o;
    o.set = [this](int name, const void* value, size_t length) -> int {
      ++sets;
      if (name != FI_OPT_FI_HMEM_P2P || length != sizeof(int)) return -FI_ENOPROTOOPT;
      int opt = *static_cast<const int*>(value);
      // efa_hmem_validate_p2p_opt: REQUIRED needs the device's P2P.
      if (opt == FI_HMEM_P2P_REQUIRED && !p2p_supported_by_device) return -FI_EOPNOTSUPP;
      p2p_set = opt;
      return 0;
    };
    o.get = [this](int name, void* value, size_t* length) -> int {
      ++gets;
      if (*length < sizeof(bool)) return -FI_ETOOSMALL;
#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 18))
      if (name == FI_OPT_EFA_EMULATED_READ) {
        *static_cast<bool*>(value) = !rdma_read;
        *length = sizeof(bool);
        return 0;
      }
      if (name == FI_OPT_EFA_EMULATED_WRITE) {
        *static_cast<bool*>(value) = !(rdma_read && rdma_write);
        *length = sizeof(bool);
        return 0;
      }
#endif
      (void)name;
      (void)value;
      return -FI_ENOPROTOOPT;
    };
    return o;
  }
};

FiInfoPtr EfaInfo(bool cuda) {
  FiInfoPtr info = MakeHints(FabricChoice{"efa", cuda ? MemoryKind::kCuda : MemoryKind::kHost, ""});
  return info;
}

constexpr bool kHeadersKnowEfaOptions =
    FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 18));

TEST(EfaRulesTest, GpuMemoryOverEfaRequiresGpuDirectOrIsRefusedInOneLine) {
  FakeEfaEndpoint no_p2p;
  no_p2p.p2p_supported_by_device = false;
  try {
    ApplyEfaEndpointRules(*EfaInfo(/*cuda=*/true), no_p2p.Options());
    FAIL() << "a host without GPUDirect was not refused";
  } catch (const UsageError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("GPUDirect"), std::string::npos) << message;
    EXPECT_NE(message.find("FI_HMEM_P2P_REQUIRED"), std::string::npos) << message;
    EXPECT_NE(message.find("--memory host"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
  }

  FakeEfaEndpoint p2p;
  DeviceRdma rdma = ApplyEfaEndpointRules(*EfaInfo(true), p2p.Options());
  EXPECT_EQ(p2p.p2p_set, FI_HMEM_P2P_REQUIRED);
  EXPECT_TRUE(rdma.efa);
  EXPECT_TRUE(rdma.p2p_required);
  EXPECT_NE(rdma.Summary().find("GPUDirect required"), std::string::npos);
  if (kHeadersKnowEfaOptions) {
    EXPECT_EQ(rdma.device_rdma, 1);
    EXPECT_EQ(rdma.emulated_write, 0);
    EXPECT_TRUE(rdma.WritesAreRdma());
    EXPECT_EQ(MemoryLabel("cuda", rdma), "cuda");
    EXPECT_NE(rdma.Summary().find("device RDMA on, WRITEs by the NIC"), std::string::npos)
        << rdma.Summary();
  }
}

// A GPU number from an emulated path is never reported as a GPU number.
TEST(EfaRulesTest, EmulatedWritesAreSaidAndNeverCountAsGpuNumbers) {
  FakeEfaEndpoint no_write;
  no_write.rdma_write = false;  // a device with RDMA read only: WRITEs emulated
  DeviceRdma rdma = ApplyEfaEndpointRules(*EfaInfo(true), no_write.Options());
  EXPECT_FALSE(rdma.WritesAreRdma());
  EXPECT_EQ(MemoryLabel("cuda", rdma), "cuda-emulated");
  EXPECT_EQ(MemoryLabel("host", rdma), "host");
  if (kHeadersKnowEfaOptions) {
    EXPECT_EQ(rdma.emulated_write, 1);
    EXPECT_NE(rdma.Summary().find("WRITEs emulated"), std::string::npos) << rdma.Summary();
  } else {
    EXPECT_NE(rdma.Summary().find("unknown"), std::string::npos) << rdma.Summary();
  }
  FakeEfaEndpoint no_rdma;
  no_rdma.rdma_read = false;  // FI_EFA_USE_DEVICE_RDMA=0, or API < 1.18
  rdma = ApplyEfaEndpointRules(*EfaInfo(true), no_rdma.Options());
  EXPECT_EQ(MemoryLabel("cuda", rdma), "cuda-emulated");
  if (kHeadersKnowEfaOptions) {
    EXPECT_EQ(rdma.device_rdma, 0);
  }
}

// Host memory over efa asks nothing of P2P; other providers nothing at all.
TEST(EfaRulesTest, OnlyGpuMemoryOverEfaAsksForGpuDirect) {
  FakeEfaEndpoint host;
  DeviceRdma rdma = ApplyEfaEndpointRules(*EfaInfo(false), host.Options());
  EXPECT_EQ(host.sets, 0);
  EXPECT_TRUE(rdma.efa);
  EXPECT_FALSE(rdma.p2p_required);

  FakeEfaEndpoint shm;
  FiInfoPtr info = MakeHints(FabricChoice{"shm", MemoryKind::kCuda, ""});
  rdma = ApplyEfaEndpointRules(*info, shm.Options());
  EXPECT_EQ(shm.sets + shm.gets, 0);
  EXPECT_FALSE(rdma.efa);
  EXPECT_EQ(rdma.Summary(), "");
  EXPECT_EQ(MemoryLabel("cuda", rdma), "cuda");  // shm's CUDA IPC is a GPU path
}

}  // namespace
}  // namespace tutorial
