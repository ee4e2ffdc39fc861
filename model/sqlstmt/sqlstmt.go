// Package sqlstmt holds the type of a named SQL statement of fabric's
// Postgres catalog (pgsql.Statement is this Statement). It is its own
// package so that the pdk can take a statement without importing the
// catalog: importing model/pgsql builds every statement text at package
// initialization, which every plugin would carry, Valkey ones included.
package sqlstmt

// Statement is one named statement of the catalog.
type Statement struct {
	// Name identifies the statement: "<family>.<what>".
	Name string
	// SQL is the statement text.
	SQL string
	// Params names the positional parameters, for people.
	Params []string
	// Tables are the tables the statement reads or writes.
	Tables []string
}
