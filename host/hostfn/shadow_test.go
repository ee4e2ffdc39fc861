package hostfn

import (
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
)

func TestSQLWrites(t *testing.T) {
	for _, tc := range []struct {
		st    pgsql.Statement
		write bool
	}{
		{pgsql.ExecCoreLock, false},     // SELECT ... FOR UPDATE: a row lock, not a write
		{pgsql.AttemptLockLease, false}, // likewise
		{pgsql.CompletionInsert, true},
		{pgsql.Statement{SQL: "WITH x AS (UPDATE t SET a = 1 RETURNING a) SELECT a FROM x"}, true},
		{pgsql.Statement{SQL: "SELECT last_update_ms FROM t"}, false},
		{pgsql.Statement{SQL: "SELECT nextval('s')"}, true},
	} {
		if got := sqlWrites(tc.st.SQL); got != tc.write {
			t.Errorf("sqlWrites(%s %q) = %v, want %v", tc.st.Name, tc.st.SQL, got, tc.write)
		}
	}
}

func TestActionNormalised(t *testing.T) {
	a := fcallAction(valkeyCall("ff_promote_delayed", []string{"ff:exec:{fp:5}:{fp:5}:a4e5f0e0-5917-431b-977b-29437f8c0ae2:core", "ff:idx:{fp:5}:lane:default:delayed"},
		[]string{"{fp:5}:a4e5f0e0-5917-431b-977b-29437f8c0ae2", "1795784769685", "7"}))
	if a.Subject != "{fp:5}:a4e5f0e0-5917-431b-977b-29437f8c0ae2" {
		t.Fatalf("subject = %q", a.Subject)
	}
	want := `keys=["ff:exec:{fp:5}:{fp:5}:a4e5f0e0-5917-431b-977b-29437f8c0ae2:core" "ff:idx:{fp:5}:lane:default:delayed"] args=["{fp:5}:a4e5f0e0-5917-431b-977b-29437f8c0ae2" "<ms>" "7"]`
	if a.Args != want {
		t.Fatalf("args = %s\nwant   %s", a.Args, want)
	}
	if abi.Mutates("ff_read_summary") || !abi.Mutates("ff_promote_delayed") || !abi.Mutates("ff_unknown_new") {
		t.Fatal("abi.Mutates misclassifies")
	}
}

func valkeyCall(fn string, keys, args []string) abi.Call {
	return abi.Call{Function: fn, Keys: keys, Args: args}
}
