// EFA's rules that no loopback provider enforces (/work/shared/DESIGN.md),
// pinned where our code makes the choice. Each test names the rule and
// where libfabric's EFA provider states it (ofiwg/libfabric, v1.22-v2.6).
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>

#include <cstring>
#include <memory>

#include "common/network.h"
#include "common/recovery_nic.h"

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
  FiInfoPtr hints = MakeHints(FabricChoice{"efa", MemoryKind::kHost, ""}, NetworkOptions{});
  ASSERT_NE(hints->fabric_attr->name, nullptr);
  EXPECT_STREQ(hints->fabric_attr->name, "efa");
  EXPECT_STREQ(hints->fabric_attr->prov_name, "efa");
  // Other providers' fabrics are not named.
  FiInfoPtr shm = MakeHints(FabricChoice{"shm", MemoryKind::kHost, ""}, NetworkOptions{});
  EXPECT_EQ(shm->fabric_attr->name, nullptr);
}

// The registration modes EFA requires (DESIGN.md; efa_user_info.c), GPU
// memory with FI_MR_HMEM, per-operation scratch space (FI_CONTEXT2 for
// efa-direct), and the chapter's threading level.
TEST(EfaRulesTest, HintsCarryEfaModesAndTheChaptersThreading) {
  FiInfoPtr series = MakeHints(FabricChoice{"efa", MemoryKind::kHost, ""}, NetworkOptions{});
  uint64_t required = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  EXPECT_EQ(series->domain_attr->mr_mode & required, required);
  EXPECT_TRUE(series->mode & FI_CONTEXT2);
  EXPECT_EQ(series->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(series->domain_attr->threading, FI_THREAD_SAFE);  // the series'
  EXPECT_FALSE(series->caps & FI_HMEM);

  NetworkOptions ours;
  ours.threading = FI_THREAD_DOMAIN;
  FiInfoPtr cuda = MakeHints(FabricChoice{"efa", MemoryKind::kCuda, ""}, ours);
  EXPECT_TRUE(cuda->caps & FI_HMEM);
  EXPECT_TRUE(cuda->domain_attr->mr_mode & FI_MR_HMEM);
  EXPECT_EQ(cuda->domain_attr->threading, FI_THREAD_DOMAIN);
}

// The series and DESIGN.md: a remote write is told by the completion's
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

// DESIGN.md, "Register with FI_SEND | FI_RECV as well as the RMA access
// bits" (efa_mr.c maps them to the device's local access rights).
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

}  // namespace
}  // namespace tutorial
