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
	"github.com/switchyard-dev/switchyard/tasks"
)

// Token quotas and spend budgets per API key (switchyard keys set-limits):
// the prompt and completion tokens the nodes report, and those tokens at
// the operator's price for their task type (--token-prices), are added up
// per key, per UTC day and per UTC month, across the cluster (in Redis) or
// on one instance. A request of a key with such limits holds, before it
// is dispatched, the most it may spend: its prompt's bytes (a token is at
// least a byte, and what a node reports is clamped to what it was sent)
// and its max_tokens, or --quota-completion-estimate when it names none,
// at its task type's price (holdOf). The hold is admitted while every
// limit is above what the key spent plus what its tasks under way hold,
// in one step on every instance together (ratelimit.Quota.Reserve), so
// the last request admitted takes the key past a limit by at most its own
// hold, and none after it runs: the refusal is 429 quota_exceeded for
// tokens, 402 budget_exhausted for a budget, with headers naming the
// limit and when it resets. The task's end replaces its hold with what it
// used (Settle, before its answer is sent); a task that fails or is
// cancelled gives its hold back; the hold of an instance that died lapses
// after the longest its task could have run (holdFor). Async tasks are
// judged when queued and hold when claimed (asyncAdmission).
//
// Only the keys with such limits cost a Redis round trip (two per task: the
// hold and its settling); a key without them costs none: when an instance
// first admits a limited key on a UTC day, or sees a key's limits appear,
// it raises the key's totals to what the usage ledger holds for the day
// and the month (one store read; ratelimit.Quota.Raise never counts a
// spend twice). So limits set on a key that has been spending count what
// it spent before, all but its last flush interval's. The tokens of a task
// whose answer reached no requester are added by the instance holding its
// node (spendOrphan): leaving before each answer spends no less.

// newQuota builds the quota counters (shared through Redis in a cluster)
// and their metrics.
func (a *App) newQuota() {
	a.quotaRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "quota_refusals_total",
		Help: "Requests and claimed async tasks refused (429 quota_exceeded, 402 budget_exhausted): their API key's spent tokens or budget of the day or the month, with what its tasks under way hold, had reached a limit.",
	})
	a.quotaErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "quota_errors_total",
		Help: "Quota holds that could not be made (the request was let through) and spends that could not be counted (Redis unreachable).",
	})
	a.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "tokens_total",
		Help: "Tokens the nodes reported for the tasks that ended here, by task type and kind (prompt, completion). Per key: GET /admin/api/usage.",
	}, []string{"task_type", "kind"})
	a.registry.MustRegister(a.quotaRefused, a.quotaErrors, a.tokens)
	a.quota = ratelimit.NewMemoryQuota()
	a.orphanSpends = make(chan store.UsageReport, maxOrphanSpends)
	if a.cluster != nil {
		a.quota = ratelimit.NewRedisQuota(a.cluster.conn.Client(), ratelimit.QuotaPrefix(a.cfg.Namespace))
	}
}

// checkKey wraps a task route; it needs requireAccount (which refused a
// node key: scope.go) and, on the GemmaNet routes, the body's reader
// before it. It refuses a task type outside the key's list (403
// key_scope). Its token and budget limits are judged where the task's
// hold is known (admit); a key without limits is remembered as such here,
// so that its tokens are never added to quota counters.
func (a *App) checkKey(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		acct := accountOf(c)
		if b, ok := c.Get(ctxTaskBody).(*taskBody); ok && !acct.KeyLimits.AllowsType(b.TaskType) {
			return typeOutOfScope(acct.KeyLimits)
		}
		if !acct.KeyLimits.Any() {
			a.quotaKeys.note(acct.KeyID, false, time.Time{}) // no clock read: the hot path of a key without limits
		}
		return next(c)
	}
}

// admitRequest holds what req may spend against its key's token and
// budget limits (admit), for a request of c; split says it runs in parts.
// release gives back what the task's end did not settle: call it when the
// task has ended.
func (a *App) admitRequest(c echo.Context, req tasks.Request, split bool) (release func(), err error) {
	h := ratelimit.Hold{ID: req.TaskID, Amount: a.holdOf(req, split)}
	return a.admit(c.Request().Context(), req.AccountID, req.KeyID, accountOf(c).KeyLimits, h, a.holdFor(req.Stream), c.Response().Header())
}

// noRelease is the release of a task that holds nothing.
func noRelease() {}

// admit judges the limits l of key (of accountID) and, if they have room,
// holds h for the task h.ID until its end settles it (spendTokens) or
// release gives it back, at most holdFor. A key without limits costs
// nothing here. A key at a limit gets its refusal (429 or 402), its
// headers set on hdr. h without an ID is judged and not held (a queued
// async task).
func (a *App) admit(ctx context.Context, accountID, key string, l store.KeyLimits, h ratelimit.Hold, holdFor time.Duration, hdr http.Header) (release func(), err error) {
	release, tot := a.reserve(ctx, accountID, key, l, h, holdFor)
	if release != nil {
		return release, nil
	}
	a.quotaRefused.Inc()
	return nil, refusal(hdr, l, tot)
}

// reserve is admit's judgement: release nil when the limits have no room,
// with the totals judged. Counters that cannot be reached let the task
// through, holding nothing, as the rate limits do.
func (a *App) reserve(ctx context.Context, accountID, key string, l store.KeyLimits, h ratelimit.Hold, holdFor time.Duration) (release func(), _ ratelimit.Totals) {
	if key == "" || !l.Any() {
		return noRelease, ratelimit.Totals{}
	}
	now := time.Now()
	if a.quotaKeys.note(key, true, now) {
		a.seedQuota(ctx, accountID, key, now)
	}
	if a.cluster != nil && !a.cluster.redisOK.Load() {
		// Redis is known to be down: the request must not wait on it
		// (invariant 10).
		a.quotaErrors.Inc()
		return noRelease, ratelimit.Totals{}
	}
	h.Until = now.Add(holdFor)
	ctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
	tot, ok, err := a.quota.Reserve(ctx, key, limitsOf(l), h, now)
	cancel()
	switch {
	case err != nil:
		a.quotaErrors.Inc()
		a.log.Debug("token quota unavailable; allowing the request", "err", err)
		return noRelease, ratelimit.Totals{}
	case !ok:
		return nil, tot
	case h.ID == "":
		return noRelease, tot
	}
	a.quotaHolds.add(h.ID)
	return func() {
		if a.quotaHolds.take(h.ID) {
			a.settle(key, h.ID, ratelimit.Amount{}, time.Now())
		}
	}, tot
}

// refusal is the answer to a task of a key whose limits l had no room at
// tot (quotaRefusal), its headers set on hdr.
func refusal(hdr http.Header, l store.KeyLimits, tot ratelimit.Totals) *apiError {
	if ae := quotaRefusal(hdr, l, tot, time.Now()); ae != nil {
		return ae
	}
	// Reserve and quotaRefusal judge alike (TestQuotaRefusal holds them
	// to it): a safety net, not a path.
	return newError(http.StatusTooManyRequests, CodeQuotaExceeded, "this API key has reached one of its token or budget limits")
}

// limitsOf is l in the counters' units (budgets in thousandths).
func limitsOf(l store.KeyLimits) ratelimit.Limits {
	return ratelimit.Limits{
		Day:   ratelimit.Amount{Tokens: l.TokensPerDay, Units: l.BudgetPerDay * unitScale},
		Month: ratelimit.Amount{Tokens: l.TokensPerMonth, Units: l.BudgetPerMonth * unitScale},
	}
}

// holdOf is the most req may spend: the bytes it sends its node (content
// and params: a token is at least a byte) and its params' max_tokens, or
// --quota-completion-estimate when it names none; a split task sends each
// of its parts the params, and each may write max_tokens. At its task
// type's price, within ratelimit.MaxHold.
func (a *App) holdOf(req tasks.Request, split bool) ratelimit.Amount {
	completion, ok := tasks.MaxTokens(req.Params) // what the node may charge (tasks' clamp)
	if !ok {
		completion = a.cfg.QuotaCompletionEstimate
	}
	parts := int64(1)
	if split {
		parts = tasks.SplitParts
	}
	n := min(int64(len(req.Content))+parts*(int64(len(req.Params))+completion), ratelimit.MaxHold)
	price, ok := a.cfg.TokenPrices[req.TaskType]
	if !ok {
		price = 1
	}
	return ratelimit.Amount{Tokens: n, Units: int64(math.Ceil(min(float64(n)*price*unitScale, ratelimit.MaxHold)))}
}

// holdFor is how long a task's hold may last: past every deadline of its
// attempts, their waits for a slot included, so that only the hold of an
// instance that died before settling it lapses, and only then.
func (a *App) holdFor(stream bool) time.Duration {
	run := a.cfg.TaskTimeout
	if stream {
		run = a.cfg.StreamMax
	}
	return time.Duration(tasks.DefaultConfig().MaxAttempts)*(a.cfg.QueueTimeout+run) + time.Minute
}

// settle replaces the hold id of key with used (Quota.Settle). Redis
// unreachable: the spend goes uncounted, counted as such, and the hold
// lapses at its Until.
func (a *App) settle(key, id string, used ratelimit.Amount, at time.Time) {
	if a.cluster != nil && !a.cluster.redisOK.Load() {
		a.quotaErrors.Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	if err := a.quota.Settle(ctx, key, id, used, at); err != nil {
		a.quotaErrors.Inc()
		a.log.Debug("cannot settle a task's hold on its key's quota", "key_id", key, "err", err)
	}
}

// limitsOfKey is the limits of key (of accountID) for an async task's
// claim, which has no request, from keyLimits or else one store read of
// the account's keys. A key the store no longer lists has none.
func (a *App) limitsOfKey(ctx context.Context, accountID, key string) (store.KeyLimits, error) {
	now := time.Now()
	if l, ok := a.keyLimits.get(key, now); ok {
		return l, nil
	}
	keys, err := a.store.ListKeys(ctx, accountID)
	if err != nil {
		return store.KeyLimits{}, err
	}
	var l store.KeyLimits
	for _, k := range keys {
		a.keyLimits.put(k.ID, k.Limits, now.Add(authTTL))
		if k.ID == key {
			l = k.Limits
		}
	}
	return l, nil
}

// keyLimitsCache keeps the limits of the keys whose async tasks this
// instance claims, each for authTTL: a claim costs no store read, and a
// change of a key's limits reaches the claims no later than the auth
// cache brings it to the requests.
type keyLimitsCache struct {
	mu sync.Mutex
	m  map[string]keyLimitsEntry
}

type keyLimitsEntry struct {
	l       store.KeyLimits
	expires time.Time
}

func (k *keyLimitsCache) get(key string, now time.Time) (store.KeyLimits, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[key]
	if !ok || !now.Before(e.expires) {
		return store.KeyLimits{}, false
	}
	return e.l, true
}

func (k *keyLimitsCache) put(key string, l store.KeyLimits, expires time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil || len(k.m) >= quotaKeysMax {
		k.m = map[string]keyLimitsEntry{} // bounded: forgotten keys cost a store read again
	}
	k.m[key] = keyLimitsEntry{l: l, expires: expires}
}

// quotaHolds are the task ids of the holds admitted here and not ended.
// Whichever comes first takes a hold: the task's end, to settle it with
// what it used, or its admitter's release, to give it back.
type quotaHolds struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (q *quotaHolds) add(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = map[string]struct{}{}
	}
	q.m[id] = struct{}{}
}

// take removes hold id, reporting whether it was there.
func (q *quotaHolds) take(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.m[id]
	delete(q.m, id)
	return ok
}

// typeOutOfScope is the 403 for a task type a key may not ask for.
func typeOutOfScope(l store.KeyLimits) *apiError {
	return newError(http.StatusForbidden, CodeKeyScope, "this API key may ask only for the task types "+strings.Join(l.TaskTypes, ", "))
}

// quotaRefusal is the refusal of a key at one of its limits (in this
// order: tokens of the day, of the month, budget of the day, of the
// month), judged as ratelimit.Limits.Room judges: what the key spent plus
// what its tasks under way hold. 429 quota_exceeded for tokens, 402
// budget_exhausted for a budget, with its headers set; nil when none is
// reached. A limit reached only with the holds is retried in a second
// (holds are settled as tasks end), one reached by the spends alone when
// its window resets.
func quotaRefusal(h http.Header, l store.KeyLimits, t ratelimit.Totals, now time.Time) *apiError {
	u := now.UTC()
	tomorrow := time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
	nextMonth := time.Date(u.Year(), u.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	for _, q := range []struct {
		name       string
		limit      int64 // in the limit's unit
		used, held int64 // in the counters' unit
		scale      int64 // counters' units a limit's unit
		reset      time.Time
		budget     bool
	}{
		{"tokens_per_day", l.TokensPerDay, t.Day.Tokens, t.Held.Tokens, 1, tomorrow, false},
		{"tokens_per_month", l.TokensPerMonth, t.Month.Tokens, t.Held.Tokens, 1, nextMonth, false},
		{"budget_per_day", l.BudgetPerDay, t.Day.Units, t.Held.Units, unitScale, tomorrow, true},
		{"budget_per_month", l.BudgetPerMonth, t.Month.Units, t.Held.Units, unitScale, nextMonth, true},
	} {
		if q.limit <= 0 || q.used+q.held < q.limit*q.scale {
			continue
		}
		used, held := q.used/q.scale, (q.used+q.held)/q.scale-q.used/q.scale
		secs := strconv.FormatInt(int64(q.reset.Sub(u).Round(time.Second)/time.Second), 10)
		retry := secs
		var under string
		if q.used < q.limit*q.scale {
			retry = "1"
			under = ", and its tasks under way hold " + strconv.FormatInt(held, 10) + " more until they end"
			h.Set("X-Quota-Held", strconv.FormatInt(held, 10))
		}
		h.Set("X-Quota-Limit", q.name+"="+strconv.FormatInt(q.limit, 10))
		h.Set("X-Quota-Used", strconv.FormatInt(used, 10))
		h.Set("X-Quota-Reset", secs)
		if q.budget {
			return &apiError{Status: http.StatusPaymentRequired, Code: CodeBudgetExhausted, RetryAfter: retry,
				Message: "this API key has spent " + strconv.FormatInt(used, 10) + " of its " + q.name + " of " +
					strconv.FormatInt(q.limit, 10) + " units (its tasks' tokens at the operator's prices)" + under + "; it resets at " + q.reset.Format(time.RFC3339)}
		}
		return &apiError{Status: http.StatusTooManyRequests, Code: CodeQuotaExceeded, RetryAfter: retry,
			Message: "this API key has used " + strconv.FormatInt(used, 10) + " of its " + strconv.FormatInt(q.limit, 10) +
				" " + q.name + " (the tokens its tasks' nodes reported)" + under + "; it resets at " + q.reset.Format(time.RFC3339)}
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

// seedQuota raises key's totals of now's day and month to what the
// usage ledger holds for them. A failure is counted and retried a while
// later (quotaKeys.note); meanwhile the totals count from the spends alone.
func (a *App) seedQuota(ctx context.Context, accountID, key string, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	u := now.UTC()
	today := u.Format(time.DateOnly)
	rows, err := a.store.Usage(ctx, store.UsageQuery{AccountID: accountID, From: u.AddDate(0, 0, 1-u.Day()), To: u})
	if err == nil {
		var day, month ratelimit.Amount
		for _, r := range rows {
			if r.KeyID != key {
				continue
			}
			p := a.priced(r.TaskType, r.PromptTokens+r.CompletionTokens)
			month.Add(p)
			if r.Day == today {
				day.Add(p)
			}
		}
		err = a.quota.Raise(ctx, key, day, month, now)
	}
	if err != nil {
		a.quotaErrors.Inc()
		a.log.Debug("cannot seed a key's token totals from the usage ledger; counting from its spends", "key_id", key, "err", err)
		return
	}
	a.quotaKeys.seeded(key, now)
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

// spendTokens adds a finished task's tokens to its key's totals: in place
// of its hold, if it was admitted with one (whatever its end: a failed
// task gives its hold back). It runs before the task's answer is sent, so
// that the next request of the key sees them on any instance.
func (a *App) spendTokens(rec store.TaskRecord) {
	held := a.quotaHolds.take(rec.ID)
	if rec.Usage.PromptTokens > 0 {
		a.tokens.WithLabelValues(rec.TaskType, "prompt").Add(float64(rec.Usage.PromptTokens))
	}
	if rec.Usage.CompletionTokens > 0 {
		a.tokens.WithLabelValues(rec.TaskType, "completion").Add(float64(rec.Usage.CompletionTokens))
	}
	switch {
	case held:
		a.settle(rec.KeyID, rec.ID, a.spendOf(rec), rec.FinishedAt)
	case rec.Usage.PromptTokens+rec.Usage.CompletionTokens > 0:
		a.spend(rec.KeyID, a.spendOf(rec), rec.FinishedAt)
	}
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
// node's reader must not wait on Redis): queued for spendOrphans, a
// bounded number at a time; past that, the tokens go uncounted, and
// counted as such (maxOrphanSpends).
func (a *App) spendOrphan(rep store.UsageReport) {
	n := rep.PromptTokens + rep.CompletionTokens
	if n <= 0 || rep.KeyID == "" || !a.quotaKeys.counted(rep.KeyID) {
		return
	}
	select {
	case a.orphanSpends <- rep:
	default:
		a.quotaErrors.Inc()
	}
}

// spendOrphans spends the orphans' tokens spendOrphan queued, until ctx
// ends, and then what is still queued: its stage stops after the engine,
// whose owner side queues them, and before the Redis client closes. (Each
// spend used to run in a goroutine of its own that nothing waited for, so
// a drain could close Redis under it.)
func (a *App) spendOrphans(ctx context.Context) error {
	spend := func(rep store.UsageReport) {
		a.spend(rep.KeyID, a.priced(rep.TaskType, rep.PromptTokens+rep.CompletionTokens), rep.At)
	}
	for {
		select {
		case rep := <-a.orphanSpends:
			spend(rep)
		case <-ctx.Done():
			for {
				select {
				case rep := <-a.orphanSpends:
					spend(rep)
				default:
					return nil
				}
			}
		}
	}
}

// maxOrphanSpends bounds the orphans' spends waiting (App.spendOrphan).
const maxOrphanSpends = 64
