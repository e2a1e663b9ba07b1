package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Accounts and their API keys, in either dialect.

const accountCols = `id, name, email, trust, created_at`

func scanAccount(r row, a *Account) error {
	return r.Scan(&a.ID, &a.Name, &a.Email, &a.Trust, (*timeCol)(&a.CreatedAt))
}

func (s *sqlStore) CreateAccount(ctx context.Context, name, email, trust string) (Account, string, error) {
	trust, err := checkAccount(name, email, trust)
	if err != nil {
		return Account{}, "", err
	}
	a := Account{ID: newAccountID(), Name: name, Email: email, Trust: trust, CreatedAt: dbTime(time.Now())}
	var key string
	err = s.db.inTx(ctx, func(tx querier) error {
		_, err := tx.exec(ctx, `INSERT INTO accounts (id, name, email, trust, created_at) VALUES ($1, $2, $3, $4, $5)`,
			a.ID, a.Name, a.Email, a.Trust, a.CreatedAt)
		if s.d.isUnique(err) {
			return fmt.Errorf("store: account name %q is taken: %w", name, ErrConflict)
		}
		if err != nil {
			return err
		}
		_, key, err = insertKey(ctx, tx, a.ID)
		return err
	})
	if err != nil {
		return Account{}, "", wrapErr("create account", err)
	}
	return a, key, nil
}

func (s *sqlStore) Account(ctx context.Context, id string) (Account, error) {
	a, err := queryOne(ctx, s.db, scanAccount, `SELECT `+accountCols+` FROM accounts WHERE id = $1 AND deleted_at IS NULL`, id)
	return a, notFound(err, "account %s", id)
}

func (s *sqlStore) AccountByName(ctx context.Context, name string) (Account, error) {
	a, err := queryOne(ctx, s.db, scanAccount, `SELECT `+accountCols+` FROM accounts WHERE name = $1 AND deleted_at IS NULL`, name)
	return a, notFound(err, "account named %q", name)
}

func (s *sqlStore) DeleteAccount(ctx context.Context, id string) error {
	now := dbTime(time.Now())
	err := s.db.inTx(ctx, func(tx querier) error {
		n, err := tx.exec(ctx, `UPDATE accounts SET deleted_at = $1 WHERE id = $2 AND deleted_at IS NULL`, now, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("store: account %s: %w", id, ErrNotFound)
		}
		if _, err = tx.exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE account_id = $2 AND revoked_at IS NULL`, now, id); err != nil {
			return err
		}
		return bumpAuthSeq(ctx, tx)
	})
	return wrapErr("delete account", err)
}

// insertKey adds a key for an account the caller has checked exists.
func insertKey(ctx context.Context, tx querier, accountID string) (APIKey, string, error) {
	key, hash, prefix, err := newKey()
	if err != nil {
		return APIKey{}, "", err
	}
	id, err := newKeyID()
	if err != nil {
		return APIKey{}, "", err
	}
	k := APIKey{ID: id, AccountID: accountID, Prefix: prefix, CreatedAt: dbTime(time.Now())}
	_, err = tx.exec(ctx, `INSERT INTO api_keys (id, account_id, hash, prefix, created_at) VALUES ($1, $2, $3, $4, $5)`,
		k.ID, k.AccountID, hash, k.Prefix, k.CreatedAt)
	if err != nil {
		return APIKey{}, "", err
	}
	return k, key, nil
}

func (s *sqlStore) CreateKey(ctx context.Context, accountID string) (APIKey, string, error) {
	var k APIKey
	var key string
	err := s.db.inTx(ctx, func(tx querier) error {
		// The lock holds off a concurrent DeleteAccount, which would
		// otherwise miss the new key when it revokes the account's keys.
		var one int
		err := tx.queryRow(ctx, `SELECT 1 FROM accounts WHERE id = $1 AND deleted_at IS NULL`+s.d.forShare, accountID).Scan(&one)
		if err := notFound(err, "account %s", accountID); err != nil {
			return err
		}
		k, key, err = insertKey(ctx, tx, accountID)
		return err
	})
	if err != nil {
		return APIKey{}, "", wrapErr("create key", err)
	}
	return k, key, nil
}

func (s *sqlStore) ListKeys(ctx context.Context, accountID string) ([]APIKey, error) {
	q := `SELECT k.id, k.account_id, k.prefix, k.created_at, k.revoked_at, k.tokens_per_day, k.tokens_per_month,
		k.budget_per_day, k.budget_per_month, k.key_use, k.task_types
		FROM api_keys k JOIN accounts a ON a.id = k.account_id
		WHERE a.deleted_at IS NULL`
	var args []any
	if accountID != "" {
		if _, err := s.Account(ctx, accountID); err != nil {
			return nil, err
		}
		q += ` AND k.account_id = $1`
		args = append(args, accountID)
	}
	keys, err := collect(ctx, s.db, func(r row, k *APIKey) error {
		var types string
		err := r.Scan(&k.ID, &k.AccountID, &k.Prefix, (*timeCol)(&k.CreatedAt), optTimeCol{&k.RevokedAt},
			&k.Limits.TokensPerDay, &k.Limits.TokensPerMonth, &k.Limits.BudgetPerDay, &k.Limits.BudgetPerMonth, &k.Limits.Use, &types)
		k.Limits.TaskTypes = splitTypes(types)
		return err
	}, q+` ORDER BY k.created_at, k.id`, args...)
	if err != nil {
		return nil, wrapErr("list keys", err)
	}
	if keys == nil {
		keys = []APIKey{}
	}
	return keys, nil
}

func (s *sqlStore) RevokeKey(ctx context.Context, idOrPrefix string) error {
	if idOrPrefix == "" {
		return fmt.Errorf("store: revoke key: no key id or prefix given: %w", ErrInvalid)
	}
	err := s.db.inTx(ctx, func(tx querier) error {
		ids, err := collect(ctx, tx, func(r row, id *string) error { return r.Scan(id) }, `SELECT id FROM api_keys WHERE id = $1 OR prefix = $1 OR hash = $2`+s.d.forUpdate, idOrPrefix, revokeHash(idOrPrefix))
		if err != nil {
			return err
		}
		if err := oneKey(idOrPrefix, ids); err != nil {
			return err
		}
		n, err := tx.exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, dbTime(time.Now()), ids[0])
		if err != nil || n == 0 {
			return err
		}
		return bumpAuthSeq(ctx, tx)
	})
	return wrapErr("revoke key", err)
}

func (s *sqlStore) SetKeyLimits(ctx context.Context, idOrPrefix string, l KeyLimits) (APIKey, error) {
	if idOrPrefix == "" {
		return APIKey{}, fmt.Errorf("store: set key limits: no key id or prefix given: %w", ErrInvalid)
	}
	if err := checkKeyLimits(&l); err != nil {
		return APIKey{}, err
	}
	var k APIKey
	err := s.db.inTx(ctx, func(tx querier) error {
		keys, err := collect(ctx, tx, func(r row, k *APIKey) error {
			return r.Scan(&k.ID, &k.AccountID, &k.Prefix, (*timeCol)(&k.CreatedAt), optTimeCol{&k.RevokedAt})
		}, `SELECT id, account_id, prefix, created_at, revoked_at FROM api_keys WHERE id = $1 OR prefix = $1 OR hash = $2`+s.d.forUpdate,
			idOrPrefix, revokeHash(idOrPrefix))
		if err != nil {
			return err
		}
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = k.ID
		}
		if err := oneKey(idOrPrefix, ids); err != nil {
			return err
		}
		k = keys[0]
		k.Limits = l
		if _, err := tx.exec(ctx, `UPDATE api_keys SET tokens_per_day = $1, tokens_per_month = $2, budget_per_day = $3,
			budget_per_month = $4, key_use = $5, task_types = $6 WHERE id = $7`, l.TokensPerDay, l.TokensPerMonth, l.BudgetPerDay,
			l.BudgetPerMonth, l.Use, strings.Join(l.TaskTypes, ","), k.ID); err != nil {
			return err
		}
		return bumpAuthSeq(ctx, tx)
	})
	return k, wrapErr("set key limits", err)
}

// bumpAuthSeq raises AuthSeq in the transaction that made a key stop
// working, so no instance can read the new number before the change.
func bumpAuthSeq(ctx context.Context, tx querier) error {
	_, err := tx.exec(ctx, `UPDATE auth_changes SET seq = seq + 1 WHERE id = 1`)
	return err
}

func (s *sqlStore) AuthSeq(ctx context.Context) (int64, error) {
	seq, err := queryOne(ctx, s.db, func(r row, seq *int64) error { return r.Scan(seq) }, `SELECT seq FROM auth_changes WHERE id = 1`)
	return seq, wrapErr("auth seq", err)
}

func (s *sqlStore) Authenticate(ctx context.Context, key string) (Account, error) {
	if !looksLikeKey(key) {
		return Account{}, fmt.Errorf("store: unknown API key: %w", ErrNotFound)
	}
	a, err := queryOne(ctx, s.db, func(r row, a *Account) error {
		var types string
		err := r.Scan(&a.ID, &a.Name, &a.Email, &a.Trust, (*timeCol)(&a.CreatedAt), &a.KeyID,
			&a.KeyLimits.TokensPerDay, &a.KeyLimits.TokensPerMonth, &a.KeyLimits.BudgetPerDay, &a.KeyLimits.BudgetPerMonth,
			&a.KeyLimits.Use, &types)
		a.KeyLimits.TaskTypes = splitTypes(types)
		return err
	}, `SELECT a.id, a.name, a.email, a.trust, a.created_at, k.id, k.tokens_per_day, k.tokens_per_month,
		k.budget_per_day, k.budget_per_month, k.key_use, k.task_types
		FROM api_keys k JOIN accounts a ON a.id = k.account_id
		WHERE k.hash = $1 AND k.revoked_at IS NULL AND a.deleted_at IS NULL`, hashKey(key))
	return a, notFound(err, "API key")
}

// checkKeyLimits refuses limits out of range and puts the task types in
// order, each once.
func checkKeyLimits(l *KeyLimits) error {
	if l.TokensPerDay < 0 || l.TokensPerMonth < 0 || l.BudgetPerDay < 0 || l.BudgetPerMonth < 0 {
		return fmt.Errorf("store: set key limits: a limit is negative (0 means none): %w", ErrInvalid)
	}
	if l.Use != KeyUseAny && l.Use != KeyUseNode && l.Use != KeyUseClient {
		return fmt.Errorf("store: set key limits: use %q is not node, client or empty: %w", l.Use, ErrInvalid)
	}
	for _, t := range l.TaskTypes {
		if t == "" || len(t) > 64 || strings.ContainsAny(t, ", ") || t != cleanText(t) {
			return fmt.Errorf("store: set key limits: %q is not a task type: %w", t, ErrInvalid)
		}
	}
	l.TaskTypes = slices.Compact(slices.Sorted(slices.Values(l.TaskTypes)))
	if len(l.TaskTypes) == 0 {
		l.TaskTypes = nil
	}
	return nil
}

// splitTypes reads api_keys.task_types; nil for none.
func splitTypes(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
