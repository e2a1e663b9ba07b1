package server

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/ratelimit"
	"github.com/switchyard-dev/switchyard/store"
)

// Token quotas and spend budgets per API key (switchyard keys set-limits):
// the prompt and completion tokens the nodes report, and those tokens at
// the operator's price for their task type (--token-prices), are added up
// per key, per UTC day and per UTC month, across the cluster (in Redis) or
// on one instance. A request of a key whose total has reached a limit is
// refused before it runs — 429 quota_exceeded for tokens, 402
// budget_exhausted for a budget — with headers naming the limit and when
// it resets. The task that crosses the limit runs (its tokens are known only
// at its end); the next is refused, on every instance: the totals are
// added to before the crossing task's answer is sent.
//
// Only the tokens of keys with such limits are added up there (a key
// without them costs no Redis round trip per task): when an instance first
// checks a limited key on a UTC day, or sees a key's limits appear, it
// raises the key's totals to what the usage ledger holds for the day and
// the month (one store read; ratelimit.Quota.Raise never counts a spend
// twice). So limits set on a key that has been spending count what it
// spent before, all but its last flush interval's. The tokens of a task
// whose answer reached no requester are added by the instance holding its
// node (spendOrphan): leaving before each answer spends no less.

// newQuota builds the quota counters (shared through Redis in a cluster)
// and their metrics.
func (a *App) newQuota() {
	a.quotaRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "quota_refusals_total",
		Help: "Requests answered 429 quota_exceeded: their API key had spent its tokens of the day or the month.",
	})
	a.quotaErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "quota_errors_total",
		Help: "Quota checks that could not be made (the request was let through) and spends that could not be counted (Redis unreachable).",
	})
	a.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "tokens_total",
		Help: "Tokens the nodes reported for the tasks that ended here, by task type and kind (prompt, completion). Per key: GET /admin/api/usage.",
	}, []string{"task_type", "kind"})
	a.registry.MustRegister(a.quotaRefused, a.quotaErrors, a.tokens)
	a.quota = ratelimit.NewMemoryQuota()
	a.orphanSpends = make(chan struct{}, maxOrphanSpends)
	if a.cluster != nil {
		a.quota = ratelimit.NewRedisQuota(a.cluster.conn.Client(), ratelimit.QuotaPrefix(a.cfg.Namespace))
	}
}

// checkKey wraps a task route; it needs requireAccount (which refused a
// node key: scope.go) and, on the GemmaNet routes, the body's reader
// before it. It refuses a task type outside the key's list (403
// key_scope), then a key at one of its limits. A key without limits costs
// nothing here.
func (a *App) checkKey(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		acct := accountOf(c)
		if b, ok := c.Get(ctxTaskBody).(*taskBody); ok && !acct.KeyLimits.AllowsType(b.TaskType) {
			return typeOutOfScope(acct.KeyLimits)
		}
		limited := acct.KeyLimits.Any()
		if !limited {
			a.quotaKeys.note(acct.KeyID, false, time.Time{}) // no clock read: the hot path of a key without limits
			return next(c)
		}
		now := time.Now()
		seed := a.quotaKeys.note(acct.KeyID, true, now)
		if seed {
			a.seedQuota(c.Request().Context(), acct, now)
		}
		ctx, cancel := context.WithTimeout(c.Request().Context(), 250*time.Millisecond)
		day, month, err := a.quota.Spent(ctx, acct.KeyID, now)
		cancel()
		if err != nil {
			// Like the rate limits: counters that cannot be read let the
			// request through rather than failing it.
			a.quotaErrors.Inc()
			a.log.Debug("token quota unavailable; allowing the request", "err", err)
			return next(c)
		}
		if ae := quotaRefusal(c.Response().Header(), acct.KeyLimits, day, month, now); ae != nil {
			a.quotaRefused.Inc()
			return ae
		}
		return next(c)
	}
}

// typeOutOfScope is the 403 for a task type a key may not ask for.
func typeOutOfScope(l store.KeyLimits) *apiError {
	return newError(http.StatusForbidden, CodeKeyScope, "this API key may ask only for the task types "+strings.Join(l.TaskTypes, ", "))
}

// quotaRefusal is the refusal of a key at one of its limits (in this
// order: tokens of the day, of the month, budget of the day, of the
// month): 429 quota_exceeded for tokens, 402 budget_exhausted for a budget,
// with its headers set; nil when none is reached.
func quotaRefusal(h http.Header, l store.KeyLimits, day, month ratelimit.Amount, now time.Time) *apiError {
	u := now.UTC()
	tomorrow := time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
	nextMonth := time.Date(u.Year(), u.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	for _, q := range []struct {
		name        string
		limit, used int64 // used in the limit's unit
		reset       time.Time
		budget      bool
	}{
		{"tokens_per_day", l.TokensPerDay, day.Tokens, tomorrow, false},
		{"tokens_per_month", l.TokensPerMonth, month.Tokens, nextMonth, false},
		{"budget_per_day", l.BudgetPerDay, day.Units / unitScale, tomorrow, true},
		{"budget_per_month", l.BudgetPerMonth, month.Units / unitScale, nextMonth, true},
	} {
		if q.limit <= 0 || q.used < q.limit {
			continue
		}
		secs := strconv.FormatInt(int64(q.reset.Sub(u).Round(time.Second)/time.Second), 10)
		h.Set("X-Quota-Limit", q.name+"="+strconv.FormatInt(q.limit, 10))
		h.Set("X-Quota-Used", strconv.FormatInt(q.used, 10))
		h.Set("X-Quota-Reset", secs)
		if q.budget {
			return &apiError{Status: http.StatusPaymentRequired, Code: CodeBudgetExhausted, RetryAfter: secs,
				Message: "this API key has spent " + strconv.FormatInt(q.used, 10) + " of its " + q.name + " of " +
					strconv.FormatInt(q.limit, 10) + " units (its tasks' tokens at the operator's prices); it resets at " + q.reset.Format(time.RFC3339)}
		}
		return &apiError{Status: http.StatusTooManyRequests, Code: CodeQuotaExceeded, RetryAfter: secs,
			Message: "this API key has used " + strconv.FormatInt(q.used, 10) + " of its " + strconv.FormatInt(q.limit, 10) +
				" " + q.name + " (the tokens its tasks' nodes reported); it resets at " + q.reset.Format(time.RFC3339)}
	}
	return nil
}

// unitScale: spend is counted in thousandths of a unit, so that a price
// below a unit per token still adds up.
const unitScale = 1000

// spendOf is what a finished task costs its key: its tokens, and those
// tokens at its task type's price.
func (a *App) spendOf(rec store.TaskRecord) ratelimit.Amount {
	return a.priced(rec.TaskType, rec.Usage.PromptTokens+rec.Usage.CompletionTokens)
}

// priced is n tokens of taskType and their price (--token-prices; 1 unit
// per token when the type has none).
func (a *App) priced(taskType string, n int64) ratelimit.Amount {
	price, ok := a.cfg.TokenPrices[taskType]
	if !ok {
		price = 1
	}
	return ratelimit.Amount{Tokens: n, Units: int64(math.Round(float64(n) * price * unitScale))}
}

// seedQuota raises acct's key's totals of now's day and month to what the
// usage ledger holds for them. A failure is counted and retried a while
// later (quotaKeys.note); meanwhile the totals count from the spends alone.
func (a *App) seedQuota(ctx context.Context, acct store.Account, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	u := now.UTC()
	today := u.Format(time.DateOnly)
	rows, err := a.store.Usage(ctx, store.UsageQuery{AccountID: acct.ID, From: u.AddDate(0, 0, 1-u.Day()), To: u})
	if err == nil {
		var day, month ratelimit.Amount
		for _, r := range rows {
			if r.KeyID != acct.KeyID {
				continue
			}
			p := a.priced(r.TaskType, r.PromptTokens+r.CompletionTokens)
			month.Add(p)
			if r.Day == today {
				day.Add(p)
			}
		}
		err = a.quota.Raise(ctx, acct.KeyID, day, month, now)
	}
	if err != nil {
		a.quotaErrors.Inc()
		a.log.Debug("cannot seed a key's token totals from the usage ledger; counting from its spends", "key_id", acct.KeyID, "err", err)
		return
	}
	a.quotaKeys.seeded(acct.KeyID, now)
}

// quotaKeys is what an instance knows of the keys it has checked: whether
// each has token or budget limits, and the UTC day its totals were last
// raised to the usage ledger's (App.seedQuota).
type quotaKeys struct {
	mu   sync.Mutex
	keys map[string]quotaKey
}

type quotaKey struct {
	limited bool
	seeded  string    // YYYYMMDD (UTC) of the last seeding; "" none since the limits appeared
	retry   time.Time // no seeding is started before
}

// quotaKeysMax bounds the keys remembered; past it they are forgotten,
// and a forgotten key's tokens are counted, as an unknown key's are.
const quotaKeysMax = 100_000

// seedRetry is how long a seeding that was started (and may have failed)
// holds off the next.
const seedRetry = 5 * time.Second

// note records whether key has limits, as checked at now, and reports
// whether its totals should be seeded now: limited, not yet seeded on
// now's day, and no seeding started within seedRetry (the caller seeds).
func (q *quotaKeys) note(key string, limited bool, now time.Time) bool {
	if key == "" {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k, ok := q.keys[key]
	if ok && !limited && !k.limited {
		return false // the common case: nothing changes
	}
	if q.keys == nil || len(q.keys) >= quotaKeysMax && !ok {
		q.keys = map[string]quotaKey{}
	}
	if limited && !k.limited {
		k = quotaKey{} // limits appeared: what was spent meanwhile is only in the ledger
	}
	k.limited = limited
	seed := limited && k.seeded != now.UTC().Format("20060102") && !now.Before(k.retry)
	if seed {
		k.retry = now.Add(seedRetry)
	}
	q.keys[key] = k
	return seed
}

// seeded records that key's totals were raised to the ledger's on now's day.
func (q *quotaKeys) seeded(key string, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if k, ok := q.keys[key]; ok && k.limited {
		k.seeded = now.UTC().Format("20060102")
		q.keys[key] = k
	}
}

// counted reports whether key's tokens are added to its totals: unless
// this instance last checked it without limits. An unknown key's are (an
// async task may run on an instance that never checked its key).
func (q *quotaKeys) counted(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	k, ok := q.keys[key]
	return !ok || k.limited
}

// spendTokens adds a finished task's tokens to its key's totals. It runs
// before the task's answer is sent, so that the next request of the key
// sees them on any instance.
func (a *App) spendTokens(rec store.TaskRecord) {
	if rec.Usage.PromptTokens+rec.Usage.CompletionTokens <= 0 {
		return
	}
	if rec.Usage.PromptTokens > 0 {
		a.tokens.WithLabelValues(rec.TaskType, "prompt").Add(float64(rec.Usage.PromptTokens))
	}
	if rec.Usage.CompletionTokens > 0 {
		a.tokens.WithLabelValues(rec.TaskType, "completion").Add(float64(rec.Usage.CompletionTokens))
	}
	a.spend(rec.KeyID, a.spendOf(rec), rec.FinishedAt)
}

// spend adds amt to key's totals, if its tokens are counted (quotaKeys).
func (a *App) spend(key string, amt ratelimit.Amount, at time.Time) {
	if key == "" || !a.quotaKeys.counted(key) {
		return
	}
	if a.cluster != nil && !a.cluster.redisOK.Load() {
		// Redis is known to be down: the answer must not wait on it
		// (invariant 10); the tokens go uncounted, and counted as such.
		a.quotaErrors.Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	if err := a.quota.Spend(ctx, key, amt, at); err != nil {
		a.quotaErrors.Inc()
		a.log.Debug("cannot count a task's tokens toward its key's quota", "key_id", key, "err", err)
	}
}

// spendOrphan counts toward its key's limits the tokens of a task whose
// answer's usage no requester was told (its client left, say, while a node
// that cannot be told to stop ran it to its end): the requester, which
// counts a task's tokens, never saw them. It runs in the background (the
// node's reader must not wait on Redis), a bounded number at a time;
// past that, the tokens go uncounted, and counted as such
// (maxOrphanSpends).
func (a *App) spendOrphan(rep store.UsageReport) {
	n := rep.PromptTokens + rep.CompletionTokens
	if n <= 0 || rep.KeyID == "" || !a.quotaKeys.counted(rep.KeyID) {
		return
	}
	select {
	case a.orphanSpends <- struct{}{}:
	default:
		a.quotaErrors.Inc()
		return
	}
	go func() {
		defer func() { <-a.orphanSpends }()
		a.spend(rep.KeyID, a.priced(rep.TaskType, n), rep.At)
	}()
}

// maxOrphanSpends bounds the orphans' spends in flight (App.spendOrphan).
const maxOrphanSpends = 64
