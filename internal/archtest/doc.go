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
//   - producer and consumer reach the brokers through the drivers only:
//     internal/driver (the gRPC protocol) or internal/remoting (the classic
//     remoting protocol). They never depend on internal/broker or
//     internal/store, and import no wire codec themselves
//     (internal/pb/rmqpb, internal/remoting/wire): only the drivers know a
//     wire.
//   - internal/broker and the drivers share only the protocol packages
//     (internal/pb, the generated code and its wire codec; the remoting
//     codec internal/remoting/wire): neither side depends on the other.
//     The remoting driver speaks in the gRPC driver's types (driver.Message,
//     driver.Route, ...), so it imports internal/driver; the gRPC driver
//     never imports internal/remoting.
//   - nothing imports examples or cmd.
package archtest
