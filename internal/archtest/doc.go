// Package archtest holds the test that keeps the layer rules of the design
// visible as the code grows. It has no code of its own: the rules live in
// arch_test.go and run with the rest of the tests.
//
// The rules (module-relative package paths):
//
//   - batch, failover and lane know nothing of RocketMQ: they import no other
//     package of this module, except that lane may import failover, and all
//     three may import internal/promreg, the module's one way of
//     registering metrics, which imports nothing of this module.
//   - internal/store imports no gRPC and no protobuf: it knows bytes, topics
//     and queues.
//   - producer and consumer reach the brokers through internal/driver only;
//     they never depend on internal/broker or internal/store.
//   - internal/broker and internal/driver share only the protocol packages
//     under internal/pb (the generated code and its wire codec): neither
//     depends on the other.
//   - nothing imports examples or cmd.
package archtest
