package failover

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Errors returned by this package. Each error it returns wraps one of these,
// so callers check with errors.Is.
var (
	// ErrNoResource means there is nothing left to pick: the resource set is
	// empty, or every resource was excluded by the caller.
	ErrNoResource = errors.New("failover: no resource to pick")
	// ErrInvalidConfig means a Config field is out of range.
	ErrInvalidConfig = errors.New("failover: invalid config")
	// ErrInvalidResource means a Resource is malformed (empty or duplicate
	// key, weights out of range).
	ErrInvalidResource = errors.New("failover: invalid resource")
	// ErrSlow is the cause recorded when a success slower than
	// Config.SlowThreshold is counted as a failure.
	ErrSlow = errors.New("failover: response slower than the slow threshold")
)

// Defaults applied to zero fields of Config and Resource. The reasons are in
// the package documentation.
const (
	DefaultMaxWeight           = 100.0
	DefaultFailureFactor       = 0.5
	DefaultDownRatio           = 0.01
	DefaultSuccessStep         = 0.01
	DefaultRecoverStep         = 0.1
	DefaultRecoverThreshold    = 1
	DefaultOverprovisionFactor = 1.4
	DefaultCheckInterval       = time.Second
	DefaultQuarantine          = 10 * time.Second
)

// MaxWeightLimit bounds Resource.MaxWeight. Weights are summed per group
// and scaled on every pick; the bound keeps those sums (of any realistic
// number of resources) finite and precise.
const MaxWeightLimit = 1e12

// Resource describes one pickable resource: a key that names it, the value
// handed back by Pick, and its weights and priority.
type Resource[T any] struct {
	// Key names the resource uniquely within a Picker. Health is carried
	// across Update by key.
	Key string
	// Cluster and Endpoint say where the resource lives (a cluster and a
	// "host:port", say): the "cluster" and "endpoint" labels of its
	// metrics. When both are empty, the key is the endpoint label. Each
	// pair must be unique within a Picker.
	Cluster, Endpoint string
	// Value is what the caller wants back from a pick (an endpoint, a
	// client, a queue...). The package never looks inside it.
	Value T
	// Priority orders the groups: lower is preferred (say 0 for the local
	// data centre, 1 for the remote one). Resources of equal priority form
	// one group.
	Priority int
	// MaxWeight is the weight of a fully healthy resource; 0 means
	// DefaultMaxWeight. Healthy resources of one group share its traffic in
	// proportion to their max weights.
	MaxWeight float64
	// MinWeight is the floor a failing resource falls to; it must be below
	// MaxWeight. A resource at its floor is "down". With MinWeight > 0 a
	// down resource keeps a small share of picks, so real traffic probes it
	// and it is never dropped for good.
	MinWeight float64
	// InitWeight is the weight a new resource starts with, between MinWeight
	// and MaxWeight; 0 means MaxWeight. A low value gives a slow start.
	InitWeight float64
}

// Checker probes one down resource. It runs in the background, every
// CheckInterval, only for resources at their minimum weight. A nil error
// counts as one success (the resource climbs back by RecoverStep once
// RecoverThreshold probes in a row succeeded); an error keeps it down. A
// checker must return when ctx is done (CheckTimeout, or Close): the next
// round and Close wait for it.
type Checker[T any] func(ctx context.Context, h *Handle[T]) error

// WeightListener is told of every weight change of a resource. It runs
// synchronously on the goroutine that reported the outcome, so it must be
// quick and must not call back into the Picker's reporting methods.
type WeightListener func(key string, oldWeight, newWeight float64)

// Config tunes a Picker. The zero value is valid: every zero field takes the
// default named in its comment.
type Config[T any] struct {
	// FailureFactor multiplies the weight on each failure, in (0, 1).
	// Default DefaultFailureFactor (halve).
	FailureFactor float64
	// DownRatio: a failure that leaves the weight below DownRatio x max
	// weight drops it straight to the min weight, in [0, 1). Default
	// DefaultDownRatio, so seven failures in a row take a resource down.
	DownRatio float64
	// SuccessStep is the share of the max weight a success adds to a
	// resource above its min weight, in (0, 1]. Default DefaultSuccessStep.
	SuccessStep float64
	// RecoverStep is the share of the max weight a success adds to a down
	// resource, in (0, 1]. Default DefaultRecoverStep.
	RecoverStep float64
	// RecoverThreshold is how many successes in a row a down resource needs
	// before it climbs by RecoverStep. Default DefaultRecoverThreshold.
	RecoverThreshold int

	// OverprovisionFactor scales a group's health (sum of weights over sum
	// of max weights) into its share of traffic; a group whose scaled
	// health is at least 1 takes all the traffic it is offered. Must be
	// >= 1. Default DefaultOverprovisionFactor.
	OverprovisionFactor float64
	// SpillOnlyWhenDead makes a group keep all traffic until every one of
	// its resources is down, ignoring partial health.
	SpillOnlyWhenDead bool

	// InflightAware divides each weight by 1 + the number of picks of that
	// resource not yet reported, so a slow resource that piles up requests
	// gets fewer new ones. When set, every Pick must be followed by exactly
	// one Success, Failure or Release for the picked handle.
	InflightAware bool
	// SlowThreshold, when positive, counts a Success slower than it as a
	// Failure with cause ErrSlow.
	SlowThreshold time.Duration

	// Checker probes down resources. Nil means no active probing: a down
	// resource is then released after Quarantine (see there).
	Checker Checker[T]
	// CheckInterval is the period of the background round that probes down
	// resources and releases quarantined ones. Default DefaultCheckInterval.
	CheckInterval time.Duration
	// CheckTimeout bounds one probe. Default: CheckInterval.
	CheckTimeout time.Duration
	// Quarantine applies only without a Checker: a resource down for this
	// long is put back at min + RecoverStep x max on probation, where its
	// first failure takes it straight down again. 0 means
	// DefaultQuarantine; negative means never (a down resource then comes
	// back only through reported successes, which needs MinWeight > 0 or
	// an explicit pick).
	Quarantine time.Duration

	// Name is the "picker" label of the metrics and a field of the log
	// lines; it should be unique per Registerer.
	Name string
	// Registerer receives the weight gauge and the down counter; nil means
	// no metrics.
	Registerer prometheus.Registerer
	// Logger logs resources going down and coming back. Nil means
	// zap.NewNop().
	Logger *zap.Logger
	// WeightListener, when set, is told of every weight change.
	WeightListener WeightListener
}

// Validate reports whether New and Reconfigure would accept c's tuning; the
// error wraps ErrInvalidConfig. A reload uses it to check a new tuning
// before it commits to anything.
func (c Config[T]) Validate() error {
	_, err := c.withDefaults()
	return err
}

// withDefaults validates c and returns a copy with every default filled in.
func (c Config[T]) withDefaults() (Config[T], error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.FailureFactor, DefaultFailureFactor)
	def(&c.DownRatio, DefaultDownRatio)
	def(&c.SuccessStep, DefaultSuccessStep)
	def(&c.RecoverStep, DefaultRecoverStep)
	def(&c.OverprovisionFactor, DefaultOverprovisionFactor)
	if c.RecoverThreshold == 0 {
		c.RecoverThreshold = DefaultRecoverThreshold
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = c.CheckInterval
	}
	if c.Quarantine == 0 {
		c.Quarantine = DefaultQuarantine
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}

	bad := func(field string, v any) (Config[T], error) {
		return c, fmt.Errorf("%s = %v: %w", field, v, ErrInvalidConfig)
	}
	switch {
	case !(c.FailureFactor > 0 && c.FailureFactor < 1):
		return bad("FailureFactor", c.FailureFactor)
	case !(c.DownRatio >= 0 && c.DownRatio < 1):
		return bad("DownRatio", c.DownRatio)
	case !(c.SuccessStep > 0 && c.SuccessStep <= 1):
		return bad("SuccessStep", c.SuccessStep)
	case !(c.RecoverStep > 0 && c.RecoverStep <= 1):
		return bad("RecoverStep", c.RecoverStep)
	case c.RecoverThreshold < 0 || c.RecoverThreshold > math.MaxInt32:
		// The streak is counted in an int32: a larger threshold would wrap
		// and let every single success recover a down resource.
		return bad("RecoverThreshold", c.RecoverThreshold)
	case !(c.OverprovisionFactor >= 1) || math.IsInf(c.OverprovisionFactor, 1):
		return bad("OverprovisionFactor", c.OverprovisionFactor)
	case c.SlowThreshold < 0:
		return bad("SlowThreshold", c.SlowThreshold)
	case c.CheckInterval < 0:
		return bad("CheckInterval", c.CheckInterval)
	case c.CheckTimeout < 0:
		return bad("CheckTimeout", c.CheckTimeout)
	}
	return c, nil
}

// normalize validates r and returns its limits and initial weight with the
// defaults applied.
func (r *Resource[T]) normalize() (lim limits, init float64, err error) {
	bad := func(format string, args ...any) (limits, float64, error) {
		return limits{}, 0, fmt.Errorf("resource %q: "+format+": %w",
			append(append([]any{r.Key}, args...), ErrInvalidResource)...)
	}
	if r.Key == "" {
		return bad("empty key")
	}
	maxW, minW, initW := r.MaxWeight, r.MinWeight, r.InitWeight
	if maxW == 0 {
		maxW = DefaultMaxWeight
	}
	if initW == 0 {
		initW = maxW
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !finite(maxW) || maxW <= 0 || maxW > MaxWeightLimit:
		return bad("max weight %v must be in (0, %v]", maxW, MaxWeightLimit)
	case !finite(minW) || minW < 0 || minW >= maxW:
		return bad("min weight %v must be in [0, max weight %v)", minW, maxW)
	case !finite(initW) || initW < minW || initW > maxW:
		return bad("init weight %v must be in [min %v, max %v]", initW, minW, maxW)
	}
	return limits{max: maxW, min: minW}, initW, nil
}
