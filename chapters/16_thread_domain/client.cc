// The client is the same in every chapter (the chapters change the server):
// it lives in common/client.cc.
#include "common/client.h"

int main(int argc, char** argv) { return tutorial::ClientMain(argc, argv, "16_thread_domain"); }
