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
}

// listPackages runs `go list -deps` over the module and returns each of the
// module's own packages with its transitive (non-test) dependencies.
func listPackages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Deps", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list failed")
	dec := json.NewDecoder(strings.NewReader(string(out)))
	pkgs := map[string][]string{}
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		pkgs[rel] = p.Deps
	}
	return pkgs
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
	pkgs := listPackages(t)
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
		{"the driver never reaches the broker or the store",
			func(p string) bool { return under(p, "internal/driver") },
			ownUnder("internal/broker", "internal/store"), nil},
		{"the broker never reaches the driver",
			func(p string) bool { return under(p, "internal/broker") || under(p, "internal/store") },
			ownUnder("internal/driver", "producer", "consumer"), nil},
		{"the core imports no tracing library (contrib/otel brings OpenTelemetry through the hooks)",
			func(string) bool { return true },
			func(dep string) bool { return strings.HasPrefix(dep, "go.opentelemetry.io/") }, nil},
		{"nothing imports examples or cmd",
			func(string) bool { return true },
			ownUnder("examples", "cmd"), nil},
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
