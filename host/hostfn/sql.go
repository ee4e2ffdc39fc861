package hostfn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/hostseam"
	"github.com/fabric-host/fabric/model/pgsql"
)

// SQLMaxRows caps the rows one statement may return to a plugin.
const SQLMaxRows = 10000

// sqlRollbackTimeout bounds the rollback of a transaction a plugin call
// left open (its own context may already be dead).
const sqlRollbackTimeout = 5 * time.Second

// sqlRequest is a decoded sql_query request with its statements resolved
// against the catalog.
type sqlRequest struct {
	req   abi.SQLRequest
	stmts []pgsql.Statement
}

// decodeSQL decodes a request and names what it touches: every statement
// and every table of every statement, as capabilities.sql entries. An
// unknown statement is a bad request.
func decodeSQL(in *request) (*sqlRequest, subjects, error) {
	var r sqlRequest
	if err := in.decode(&r.req); err != nil {
		return nil, subjects{}, err
	}
	if r.req.Op != abi.SQLExec && len(r.req.Statements) > 0 {
		return nil, subjects{}, fmt.Errorf("sql op %d carries statements", r.req.Op)
	}
	var s subjects
	for _, st := range r.req.Statements {
		def, ok := pgsql.Lookup(st.Name)
		if !ok {
			return nil, subjects{}, fmt.Errorf("unknown sql statement %q (not in the host's catalog)", st.Name)
		}
		if len(st.Params) != len(def.Params) {
			return nil, subjects{}, fmt.Errorf("sql statement %s takes %d parameters (%s), got %d",
				st.Name, len(def.Params), strings.Join(def.Params, ", "), len(st.Params))
		}
		r.stmts = append(r.stmts, def)
		s.sql = append(s.sql, st.Name)
	}
	for _, def := range r.stmts {
		for _, t := range def.Tables {
			s.sql = append(s.sql, pgsql.TableGrant(t))
		}
	}
	return &r, s, nil
}

// tagIndex parses the partition index of a hash tag "{fp:7}".
func tagIndex(tag string) (int64, bool) {
	i := strings.IndexByte(tag, ':')
	if i < 0 || !strings.HasSuffix(tag, "}") {
		return 0, false
	}
	n, err := strconv.ParseInt(tag[i+1:len(tag)-1], 10, 64)
	return n, err == nil
}

// checkPartition refuses a partition_key parameter other than the scanned
// partition's (with the whole batch selected, other than one of the
// batch's partitions), unless the grant is cross-partition.
func checkPartition(c *Caller, r *sqlRequest) error {
	if c.Tag == "" || c.Caps.CrossPartition {
		return nil
	}
	want, ok := tagIndex(c.Tag)
	if !ok {
		return nil
	}
	inBatch := func(v abi.SQLValue) bool {
		if !c.WholeBatch || v.Kind != abi.SQLInt || v.Int < 0 || v.Int > 0xffff {
			return false
		}
		_, ok := c.Batch[uint16(v.Int)]
		return ok
	}
	for i, def := range r.stmts {
		for j, name := range def.Params {
			if name != "partition_key" {
				continue
			}
			if v := r.req.Statements[i].Params[j]; (v.Kind != abi.SQLInt || v.Int != want) && !inBatch(v) {
				return abi.Errorf(abi.CodeCrossPartition, fmt.Sprintf("sql %s: partition_key %s is not the scanned partition %s", def.Name, v.String(), c.Tag))
			}
		}
	}
	return nil
}

// SQLDB is the database sql_query runs on, implemented by the driver
// (backend/postgres.PluginSQL), so hostfn names none.
type SQLDB = hostseam.PluginSQL

// SQLSession runs sql_query requests for one plugin call: statement
// batches in their own transaction, or inside the call's transaction
// between SQLBegin and SQLCommit/SQLRollback. The host keeps one per call
// and Closes it when the call ends, rolling back a transaction left open
// (the plugin trapped, timed out or forgot to commit).
//
// Plugin tests use it directly to run a plugin natively against a real
// database with the host's checks: NewSQLSession(client.PluginSQL(), caps, tag).
//
// # Notes
//
//   - Not safe for concurrent use: a plugin call is single-threaded.
type SQLSession struct {
	db   SQLDB
	c    *Caller
	tx   hostseam.PluginTx
	done bool
}

// NewSQLSession returns a session on db enforcing caps on partition tag
// ("" for none), outside any host.
func NewSQLSession(db SQLDB, caps *abi.Capabilities, tag string) *SQLSession {
	return &SQLSession{db: db, c: &Caller{Caps: caps, Tag: tag, Stats: &Stats{}, Logger: slog.New(slog.DiscardHandler)}}
}

// Do authorizes and runs one request, as the host function does.
func (s *SQLSession) Do(ctx context.Context, req abi.SQLRequest) (abi.SQLResponse, error) {
	in, _ := req.MarshalBinary()
	r, subj, err := decodeSQL(&request{b: in})
	if err != nil {
		return abi.SQLResponse{}, abi.Errorf(abi.CodeBadRequest, err.Error())
	}
	if err := authorize(s.c, abi.HostFunc{Name: abi.FnSQLQuery, Capability: abi.CapSQL}, subj); err != nil {
		return abi.SQLResponse{}, err
	}
	return s.run(ctx, r)
}

func (s *SQLSession) run(ctx context.Context, r *sqlRequest) (abi.SQLResponse, error) {
	if s.db == nil {
		return abi.SQLResponse{}, abi.Errorf(abi.CodeUnavailable, "this host has no Postgres backend")
	}
	if s.done {
		return abi.SQLResponse{}, abi.Errorf(abi.CodeBadRequest, "sql session already closed")
	}
	if err := checkPartition(s.c, r); err != nil {
		return abi.SQLResponse{}, err
	}
	switch r.req.Op {
	case abi.SQLBegin:
		if s.tx != nil {
			return abi.SQLResponse{}, abi.Errorf(abi.CodeBadRequest, "sql begin: a transaction is already open")
		}
		tx, err := s.db.BeginPluginTx(ctx)
		if err != nil {
			return abi.SQLResponse{}, backendErr("sql begin", err)
		}
		s.tx = tx
		return abi.SQLResponse{}, nil
	case abi.SQLCommit, abi.SQLRollback:
		if s.tx == nil {
			return abi.SQLResponse{}, abi.Errorf(abi.CodeBadRequest, "sql commit/rollback: no open transaction")
		}
		tx := s.tx
		s.tx = nil
		var err error
		if r.req.Op == abi.SQLCommit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			return abi.SQLResponse{}, backendErr("sql commit", err)
		}
		return abi.SQLResponse{}, nil
	}
	if len(r.stmts) == 0 {
		return abi.SQLResponse{}, abi.Errorf(abi.CodeBadRequest, "sql exec without statements")
	}
	if s.tx != nil {
		resp, err := execAll(ctx, s.tx, r)
		if err != nil {
			// A failed statement aborts the Postgres transaction: end it
			// now so the plugin sees one clear state (no transaction).
			s.tx.Rollback(context.WithoutCancel(ctx))
			s.tx = nil
		}
		return resp, err
	}
	if len(r.stmts) == 1 {
		// One statement is a transaction of its own: no BEGIN, no COMMIT.
		res, err := execOne(ctx, alone{s.db}, r.stmts[0], r.req.Statements[0].Params)
		if err != nil {
			return abi.SQLResponse{}, err
		}
		return abi.SQLResponse{Results: []abi.SQLResult{res}}, nil
	}
	var resp abi.SQLResponse
	err := s.db.InPluginTx(ctx, func(tx hostseam.PluginTx) error {
		var err error
		resp, err = execAll(ctx, tx, r)
		return err
	})
	return resp, err
}

// Close rolls back a transaction still open and ends the session. It
// reports whether there was one.
func (s *SQLSession) Close(ctx context.Context) bool {
	s.done = true
	if s.tx == nil {
		return false
	}
	tx := s.tx
	s.tx = nil
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sqlRollbackTimeout)
	defer cancel()
	tx.Rollback(ctx) // a dead connection is closed, which rolls back too
	return true
}

func backendErr(what string, err error) error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return err
	}
	var se *hostseam.SQLError
	if errors.As(err, &se) {
		return abi.Errorf(abi.CodeBackend, fmt.Sprintf("%s: SQLSTATE %s: %s", what, se.Code, se.Message))
	}
	return abi.Errorf(abi.CodeBackend, fmt.Sprintf("%s: %v", what, err))
}

func execAll(ctx context.Context, tx hostseam.PluginTx, r *sqlRequest) (abi.SQLResponse, error) {
	out := abi.SQLResponse{Results: make([]abi.SQLResult, len(r.stmts))}
	for i, def := range r.stmts {
		res, err := execOne(ctx, tx, def, r.req.Statements[i].Params)
		if err != nil {
			return abi.SQLResponse{}, err
		}
		out.Results[i] = res
	}
	return out, nil
}

// querier runs one statement: an open hostseam.PluginTx, or alone.
type querier interface {
	Query(ctx context.Context, sql string, params []abi.SQLValue, maxRows int) (abi.SQLResult, error)
}

// alone runs a statement outside any transaction (SQLDB.QueryAlone).
type alone struct{ db SQLDB }

func (a alone) Query(ctx context.Context, sql string, params []abi.SQLValue, maxRows int) (abi.SQLResult, error) {
	return a.db.QueryAlone(ctx, sql, params, maxRows)
}

func execOne(ctx context.Context, tx querier, def pgsql.Statement, params []abi.SQLValue) (abi.SQLResult, error) {
	res, err := tx.Query(ctx, def.SQL, params, SQLMaxRows)
	if errors.Is(err, hostseam.ErrRowLimit) {
		return abi.SQLResult{}, abi.Errorf(abi.CodeLimit, fmt.Sprintf("sql %s returned more than %d rows", def.Name, SQLMaxRows))
	}
	if err != nil {
		return abi.SQLResult{}, backendErr("sql "+def.Name, err)
	}
	return res, nil
}

// sessions maps a plugin call's Caller to its SQL session, created on the
// call's first sql_query.
var sessions sync.Map // *Caller → *SQLSession

// EndCall ends what a plugin call left open: a transaction still open is
// rolled back and counted. The host calls it after every plugin call,
// whatever the outcome (returned, trapped, killed at its deadline).
func EndCall(ctx context.Context, c *Caller) {
	v, ok := sessions.LoadAndDelete(c)
	if !ok {
		return
	}
	if v.(*SQLSession).Close(ctx) {
		c.Logger.Warn("plugin call ended with an open sql transaction; rolled back", "plugin", c.Plugin, "partition", c.Tag)
	}
}

func sqlHandler(cfg Config) handler {
	return handler{
		decode: func(in *request) (any, subjects, error) {
			r, s, err := decodeSQL(in)
			if err != nil {
				return nil, subjects{}, err
			}
			return r, s, nil
		},
		run: func(ctx context.Context, c *Caller, req any) ([]byte, error) {
			r := req.(*sqlRequest)
			if len(r.req.Statements) > cfg.MaxCalls {
				return nil, abi.Errorf(abi.CodeLimit, fmt.Sprintf("sql batch of %d exceeds %d", len(r.req.Statements), cfg.MaxCalls))
			}
			if cfg.SQL == nil {
				return nil, abi.Errorf(abi.CodeUnavailable, "this host has no Postgres backend")
			}
			if c.Actions != nil {
				if dry := recordSQL(c, r); dry != nil {
					return nil, dry
				}
			}
			v, _ := sessions.LoadOrStore(c, &SQLSession{db: cfg.SQL, c: c})
			resp, err := v.(*SQLSession).run(ctx, r)
			if err != nil {
				return nil, err
			}
			return resp.MarshalBinary()
		},
	}
}
