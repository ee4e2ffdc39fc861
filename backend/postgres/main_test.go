package postgres_test

import (
	"os"
	"testing"

	"github.com/fabric-host/fabric/backend/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
