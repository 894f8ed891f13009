package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/twinmq/twinmq"

type pkg struct {
	ImportPath string
	Deps       []string
	Imports    []string
}

// listPackages runs `go list` over the module and returns each of the
// module's own packages with its transitive (non-test) dependencies, and
// with its direct (non-test) imports.
func listPackages(t *testing.T) (deps, imports map[string][]string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Deps,Imports", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list failed")
	dec := json.NewDecoder(strings.NewReader(string(out)))
	pkgs, direct := map[string][]string{}, map[string][]string{}
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		pkgs[rel] = p.Deps
		direct[rel] = p.Imports
	}
	return pkgs, direct
}

// under reports whether the module-relative path p is dir or below it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// own maps a dependency import path to its module-relative path, or "" when
// it is not a package of this module.
func own(dep string) (string, bool) {
	if dep == module {
		return "", true
	}
	if strings.HasPrefix(dep, module+"/") {
		return strings.TrimPrefix(dep, module+"/"), true
	}
	return "", false
}

func TestLayerRules(t *testing.T) {
	pkgs, imports := listPackages(t)
	require.NotEmpty(t, pkgs)

	type rule struct {
		name  string
		from  func(p string) bool
		ban   func(dep string) bool
		allow func(dep string) bool
	}
	inModule := func(dep string) bool { _, ok := own(dep); return ok }
	ownUnder := func(dirs ...string) func(string) bool {
		return func(dep string) bool {
			rel, ok := own(dep)
			if !ok {
				return false
			}
			for _, d := range dirs {
				if under(rel, d) {
					return true
				}
			}
			return false
		}
	}
	rules := []rule{
		{"batch and failover import nothing of this module but the metrics helper",
			func(p string) bool { return under(p, "batch") || under(p, "failover") },
			inModule, ownUnder("internal/promreg")},
		{"lane imports nothing of this module but failover (its test suite imports lane)",
			func(p string) bool { return under(p, "lane") },
			inModule, ownUnder("failover", "internal/promreg", "lane")},
		{"the metrics helper imports nothing of this module",
			func(p string) bool { return under(p, "internal/promreg") },
			inModule, nil},
		{"the store imports no gRPC and no protobuf",
			func(p string) bool { return under(p, "internal/store") },
			func(dep string) bool {
				return strings.HasPrefix(dep, "google.golang.org/grpc") ||
					strings.HasPrefix(dep, "google.golang.org/protobuf") ||
					strings.HasPrefix(dep, "github.com/golang/protobuf") ||
					ownUnder("internal/pb")(dep)
			}, nil},
		{"producer and consumer never reach the broker or the store",
			func(p string) bool { return under(p, "producer") || under(p, "consumer") },
			ownUnder("internal/broker", "internal/store"), nil},
		{"the drivers never reach the broker or the store",
			func(p string) bool { return under(p, "internal/driver") || under(p, "internal/remoting") },
			ownUnder("internal/broker", "internal/store"), nil},
		{"the gRPC driver never reaches the remoting one",
			func(p string) bool { return under(p, "internal/driver") },
			ownUnder("internal/remoting"), nil},
		{"the broker never reaches the drivers (it shares the remoting codec, internal/remoting/wire)",
			func(p string) bool { return under(p, "internal/broker") || under(p, "internal/store") },
			ownUnder("internal/driver", "internal/remoting", "producer", "consumer"), ownUnder("internal/remoting/wire")},
		{"the core imports no tracing library (contrib/otel brings OpenTelemetry through the hooks)",
			func(string) bool { return true },
			func(dep string) bool { return strings.HasPrefix(dep, "go.opentelemetry.io/") }, nil},
		{"nothing imports examples or cmd",
			func(string) bool { return true },
			ownUnder("examples", "cmd"), nil},
	}
	// Direct imports: only the drivers know a wire. producer and consumer
	// reach brokers through internal/driver (gRPC) or internal/remoting
	// (remoting) and import neither protocol's codec themselves.
	wires := ownUnder("internal/pb/rmqpb", "internal/remoting/wire")
	for p, deps := range imports {
		if !under(p, "producer") && !under(p, "consumer") {
			continue
		}
		for _, d := range deps {
			if wires(d) {
				t.Errorf("layer rule \"only the drivers know a wire\" broken: %s imports %s", p, d)
			}
		}
	}
	for _, r := range rules {
		for p, deps := range pkgs {
			if !r.from(p) {
				continue
			}
			for _, d := range deps {
				if r.ban(d) && (r.allow == nil || !r.allow(d)) {
					t.Errorf("layer rule %q broken: %s imports %s", r.name, p, d)
				}
			}
		}
	}
}
