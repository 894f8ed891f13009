package broker

import (
	"errors"
	"io"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// Telemetry serves a client's bidirectional command stream. A Settings
// command is validated, stored under the client id and answered with the
// merged Settings; the stream then stays open as the path for server
// commands (SendCommand) until the client closes it or the broker stops.
// As in the proxy, a Settings that fails validation ends the stream with
// gRPC INVALID_ARGUMENT (codes 40000..49999) or INTERNAL.
func (s *service) Telemetry(stream grpc.BidiStreamingServer[rmqpb.TelemetryCommand, rmqpb.TelemetryCommand]) error {
	b := s.b
	ctx := stream.Context()
	id := clientIDFrom(ctx)
	ts := &telemetryStream{srv: stream}
	b.attachStream(id, ts)
	defer b.detachStream(id, ts)

	type recv struct {
		cmd *rmqpb.TelemetryCommand
		err error
	}
	in := make(chan recv, 1)
	go func() {
		for {
			cmd, err := stream.Recv()
			select {
			case in <- recv{cmd, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var r recv
		select {
		case <-b.stop:
			return grpcstatus.Error(codes.Unavailable, "broker: shutting down")
		case <-ctx.Done():
			return grpcstatus.FromContextError(ctx.Err()).Err()
		case r = <-in:
		}
		if errors.Is(r.err, io.EOF) {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		switch c := r.cmd.GetCommand().(type) {
		case *rmqpb.TelemetryCommand_Settings:
			err := checkLanguage(ctx)
			var merged *rmqpb.Settings
			if err == nil {
				merged, err = b.applySettings(id, c.Settings)
			}
			if err != nil {
				st := toStatus(err)
				code := codes.Internal
				if st.GetCode() >= 40000 && st.GetCode() < 50000 {
					code = codes.InvalidArgument
				}
				b.log.Info("client settings rejected", zap.String("client", id), zap.String("code", st.GetCode().String()), zap.String("reason", st.GetMessage()))
				return grpcstatus.Errorf(code, "%s: %s", st.GetCode(), st.GetMessage())
			}
			reply := &rmqpb.TelemetryCommand{Status: okStatus(), Command: &rmqpb.TelemetryCommand_Settings{Settings: merged}}
			if err := ts.send(reply); err != nil {
				return err
			}
		case *rmqpb.TelemetryCommand_ThreadStackTrace, *rmqpb.TelemetryCommand_VerifyMessageResult:
			b.log.Debug("client telemetry reply", zap.String("client", id), zap.String("command", r.cmd.String()))
		default:
			b.log.Debug("client telemetry command ignored", zap.String("client", id))
		}
	}
}
