package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/idempotency"
)

// Idempotency-Key on the task routes (POST /api/v1/request, POST
// /api/v1/tasks, the OpenAI routes; docs/PROTOCOL.md): a request that
// repeats a key of its account within --idempotency-ttl gets the answer
// of the request that first used it, byte for byte, marked
// Idempotent-Replayed: true, and its task never runs twice. A repeat while
// the first runs, on any instance, waits for its answer. The first
// request's instance holds the key by a lease it renews while the task
// runs: if that instance dies, the lease lapses within --idempotency-lease,
// every waiter is answered 503 idempotency_key_released, and the next
// repeat runs the task.

// Headers of the mechanism.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// maxIdempotencyKey bounds a key's length (characters, printable ASCII).
const maxIdempotencyKey = 255

// idemStoreTimeout bounds each call to the key store but a waiter's wait
// (invariant 14).
const idemStoreTimeout = 2 * time.Second

// replayedHeaders are the headers of an answer kept for its replays: what
// says how to read the body or what to do next. The rest (Date, rate
// limits, quotas, Server-Timing) belong to the request that got them, and
// a replay gets its own.
var replayedHeaders = []string{
	echo.HeaderContentType, "Cache-Control", "X-Accel-Buffering", echo.HeaderLocation, "X-Should-Retry",
}

// idemAnswerOverhead is what a kept answer may hold beyond --result-max-bytes:
// the task's envelope (its id, status, usage), a stream's events' framing.
const idemAnswerOverhead = 64 << 10

// newIdempotency builds the key store (shared through Redis in a cluster)
// and its counter.
func (a *App) newIdempotency() {
	a.idemTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "idempotency", Name: "total",
		Help: "Requests with an Idempotency-Key by outcome: new (ran its task), replayed (a kept answer), waited (the answer of a request it waited for), " +
			"mismatch (422: the key was used with another request), released (503: the request waited for ended without an answer), " +
			"full (429: the account holds --idempotency-max-keys keys), invalid (400), error (503: the key store could not answer).",
	}, []string{"outcome"})
	for _, o := range []string{"new", "replayed", "waited", "mismatch", "released", "full", "invalid", "error"} {
		a.idemTotal.WithLabelValues(o)
	}
	a.idemWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "switchyard", Subsystem: "idempotency", Name: "waiting",
		Help: "Requests waiting here for the answer of an earlier request with their Idempotency-Key (on any instance).",
	})
	a.registry.MustRegister(a.idemTotal, a.idemWaiting)
	cfg := idempotency.Config{
		TTL: a.cfg.IdempotencyTTL, Lease: a.cfg.IdempotencyLease, MaxKeys: a.cfg.IdempotencyMaxKeys,
		MaxAnswerBytes: int(a.cfg.ResultMaxBytes) + idemAnswerOverhead,
	}
	a.idem = idempotency.NewMemory(cfg)
	if a.cluster != nil {
		a.idem = idempotency.NewRedis(a.cluster.conn.Client(), idempotency.Prefix(a.cfg.Namespace), cfg)
	}
}

// parseIdempotencyKey reads the Idempotency-Key header: none, or one
// value of 1 to 255 printable ASCII characters, bare or as a structured
// field string ("…", the draft's form; the quotes are not part of the key).
func parseIdempotencyKey(h http.Header) (key string, ok bool, err error) {
	vs := h.Values(HeaderIdempotencyKey)
	switch {
	case len(vs) == 0:
		return "", false, nil
	case len(vs) > 1:
		return "", false, errors.New(HeaderIdempotencyKey + " is given more than once; give it once")
	}
	k := vs[0]
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
		if strings.ContainsAny(k, `"\`) {
			return "", false, errors.New(HeaderIdempotencyKey + ` as a quoted string may not hold " or \`)
		}
	}
	if k == "" || len(k) > maxIdempotencyKey {
		return "", false, errors.New(HeaderIdempotencyKey + " must be 1 to " + strconv.Itoa(maxIdempotencyKey) + " printable ASCII characters; it is " + strconv.Itoa(len(k)))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", false, errors.New(HeaderIdempotencyKey + " must be printable ASCII (a UUID is a good key); byte " + strconv.Itoa(i) + " is not")
		}
	}
	return k, true, nil
}

// idempotent wraps a task route; it needs requireAccount (and on the
// GemmaNet routes the body's reader and checkKey) before it, so that a
// request refused for its key or its body never touches the key store.
func (a *App) idempotent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, ok, err := parseIdempotencyKey(c.Request().Header)
		if err != nil {
			a.idemTotal.WithLabelValues("invalid").Inc()
			return newError(http.StatusBadRequest, CodeInvalidIdempotencyKey, err.Error())
		}
		if !ok {
			return next(c)
		}
		body, err := taskBodyBytes(c)
		if err != nil {
			return err
		}
		// The OpenAI routes read the body in their handler.
		c.Request().Body = io.NopCloser(bytes.NewReader(body))
		acct := accountOf(c)
		// A scoped key reads only its own tasks (readsKey): its keys are
		// its own too.
		key = readsKey(acct) + "\x00" + key
		fp := fingerprint(c, body)
		ctx := c.Request().Context()
		bctx, cancel := context.WithTimeout(ctx, idemStoreTimeout)
		st, err := a.idem.Begin(bctx, acct.ID, key, fp)
		cancel()
		if err != nil {
			a.idemTotal.WithLabelValues("error").Inc()
			a.log.Debug("idempotency key store unavailable", "err", err)
			return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: "1",
				Message: "the " + HeaderIdempotencyKey + " store cannot answer now; retry (or send the request without the header)"}
		}
		switch st.Kind {
		case idempotency.Mismatch:
			a.idemTotal.WithLabelValues("mismatch").Inc()
			return newError(http.StatusUnprocessableEntity, CodeIdempotencyKeyReused,
				"this "+HeaderIdempotencyKey+" was used with another request (another route, body or task header) in the last "+a.cfg.IdempotencyTTL.String()+
					"; a key names one request: send a new key for a new request")
		case idempotency.Full:
			a.idemTotal.WithLabelValues("full").Inc()
			return &apiError{Status: http.StatusTooManyRequests, Code: CodeIdempotencyKeysExhausted, RetryAfter: "60",
				Message: "this account holds " + strconv.Itoa(a.cfg.IdempotencyMaxKeys) + " " + HeaderIdempotencyKey + "s of the last " + a.cfg.IdempotencyTTL.String() +
					" (--idempotency-max-keys); send the request without the header, or later"}
		case idempotency.Done:
			a.idemTotal.WithLabelValues("replayed").Inc()
			return replay(c, st.Answer)
		case idempotency.Running:
			a.idemWaiting.Inc()
			ans, err := a.idem.Wait(ctx, acct.ID, key, fp, st.Token)
			a.idemWaiting.Dec()
			switch {
			case err == nil:
				a.idemTotal.WithLabelValues("waited").Inc()
				return replay(c, ans)
			case ctx.Err() != nil:
				return nil // the client went away
			case errors.Is(err, idempotency.ErrReleased):
				a.idemTotal.WithLabelValues("released").Inc()
				return &apiError{Status: http.StatusServiceUnavailable, Code: CodeIdempotencyKeyReleased, RetryAfter: "1",
					Message: "the request that first sent this " + HeaderIdempotencyKey + " ended without an answer to replay (its instance stopped, " +
						"its client went away, or it was refused); the key is free again: send the request again to run it"}
			}
			a.idemTotal.WithLabelValues("error").Inc()
			return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: "1",
				Message: "the " + HeaderIdempotencyKey + " store cannot answer now; retry with the same key"}
		}
		a.idemTotal.WithLabelValues("new").Inc()
		return a.runIdempotent(c, next, acct.ID, key, st.Token)
	}
}

// fingerprint names the request a key was first sent with: its route, the
// headers that change its task, and its body.
func fingerprint(c echo.Context, body []byte) string {
	h := sha256.New()
	r := c.Request()
	for _, s := range []string{c.Path(), r.Header.Get("X-GemmaNet-Trust"), strings.Join(r.Header.Values(HeaderNodeLabels), ","), r.Header.Get(HeaderSessionID)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// runIdempotent runs the request holding the key's claim (renewing its
// lease meanwhile), records its answer as the client gets it, and keeps
// it, or releases the key if the request ran no task to its end.
func (a *App) runIdempotent(c echo.Context, next echo.HandlerFunc, scope, key, token string) error {
	ctx := c.Request().Context()
	bg := context.WithoutCancel(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { a.renewIdempotent(bg, stop, scope, key, token) })

	res := c.Response()
	rec := &answerRecorder{ResponseWriter: res.Writer, max: int(a.cfg.ResultMaxBytes) + idemAnswerOverhead}
	res.Writer = rec
	err := next(c)
	if err != nil {
		c.Error(err) // write the error answer now, through the recorder
	}
	res.Writer = rec.ResponseWriter
	close(stop)
	wg.Wait()

	sctx, cancel := context.WithTimeout(bg, idemStoreTimeout)
	defer cancel()
	status, ctype := res.Status, res.Header().Get(echo.HeaderContentType)
	if !keptAnswer(status, ctype, ctx.Err() != nil) {
		if err := a.idem.Release(sctx, scope, key, token); err != nil {
			a.log.Warn("cannot release an idempotency key; it is freed when its lease ends", "err", err)
		}
		return nil
	}
	ans := idempotency.Answer{Status: status, Body: rec.body.Bytes(), Header: map[string]string{}}
	for _, h := range replayedHeaders {
		if v := res.Header().Get(h); v != "" {
			ans.Header[h] = v
		}
	}
	if rec.over {
		ans = a.tooLargeAnswer(c, rec.n)
	}
	if err := a.idem.Complete(sctx, scope, key, token, ans); err != nil {
		// Its waiters are told the key was released (their wait ends with
		// the lease), and the next repeat runs the task again.
		a.log.Warn("cannot keep the answer of an idempotency key", "err", err)
	}
	return nil
}

// keptAnswer says whether an answer is kept for replays: one that a task
// gave (2xx), or a failure once it may have run (5xx but 503). A refusal
// before the task ran (4xx: limits, quotas, no node for it; 503: not ready,
// draining, busy) frees the key: a repeat may run it. So does a stream cut
// short by its client (its task was cancelled).
func keptAnswer(status int, contentType string, clientGone bool) bool {
	if clientGone && strings.HasPrefix(contentType, "text/event-stream") {
		return false
	}
	return (status >= 200 && status < 300) || (status >= 500 && status != http.StatusServiceUnavailable)
}

// tooLargeAnswer is what replays of an answer over the kept size get
// instead (the first client got it whole): 502 idempotent_answer_too_large,
// in the route's error shape.
func (a *App) tooLargeAnswer(c echo.Context, n int) idempotency.Answer {
	ae := newError(http.StatusBadGateway, CodeIdempotentAnswerTooLarge,
		"the answer to the request that first sent this "+HeaderIdempotencyKey+" was "+strconv.Itoa(n)+" bytes, more than the "+
			strconv.FormatInt(a.cfg.ResultMaxBytes+idemAnswerOverhead, 10)+" kept for replays; its task ran once and is not run again")
	var v any = errorBody{Error: errorDetail{Code: ae.Code, Message: ae.Message}, Detail: ae.Message}
	if strings.HasPrefix(c.Request().URL.Path, "/v1/") {
		v = openAIErrorBody{Error: toOpenAIError(ae)}
	}
	b, _ := json.Marshal(v)
	return idempotency.Answer{Status: ae.Status, Header: map[string]string{echo.HeaderContentType: echo.MIMEApplicationJSON}, Body: append(b, '\n')}
}

// renewIdempotent renews the claim every third of its lease until stop.
func (a *App) renewIdempotent(ctx context.Context, stop <-chan struct{}, scope, key, token string) {
	t := time.NewTicker(a.cfg.IdempotencyLease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, idemStoreTimeout)
		err := a.idem.Renew(rctx, scope, key, token)
		cancel()
		if errors.Is(err, idempotency.ErrNotHeld) {
			a.log.Warn("an idempotency key's lease lapsed while its task ran (the key store was unreachable for longer than --idempotency-lease); a repeat may run the task again")
			return
		}
		if err != nil {
			a.log.Debug("cannot renew an idempotency key's lease", "err", err)
		}
	}
}

// replay answers c with a kept answer.
func replay(c echo.Context, ans idempotency.Answer) error {
	h := c.Response().Header()
	for k, v := range ans.Header {
		h.Set(k, v)
	}
	h.Set(HeaderIdempotentReplayed, "true")
	c.Response().WriteHeader(ans.Status)
	_, _ = c.Response().Write(ans.Body)
	return nil
}

// answerRecorder passes an answer through to the client and keeps a copy,
// up to max bytes (over it, only the count).
type answerRecorder struct {
	http.ResponseWriter
	body bytes.Buffer
	max  int
	n    int
	over bool
}

func (r *answerRecorder) Write(p []byte) (int, error) {
	r.n += len(p)
	if !r.over {
		if r.body.Len()+len(p) > r.max {
			r.over = true
			r.body = bytes.Buffer{}
		} else {
			r.body.Write(p)
		}
	}
	return r.ResponseWriter.Write(p)
}

// Flush passes a stream's flushes through.
func (r *answerRecorder) Flush() { _ = http.NewResponseController(r.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection.
func (r *answerRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
