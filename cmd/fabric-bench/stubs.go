package main

import "context"

func runDAG(ctx context.Context, e *benchEnv, sc *Scenario) error         { return nil }
func runPromotion(ctx context.Context, e *benchEnv, sc *Scenario) error   { return nil }
func runScannerCost(ctx context.Context, e *benchEnv, sc *Scenario) error { return nil }
func runSwap(ctx context.Context, e *benchEnv, sc *Scenario) error        { return nil }
func runMemory(ctx context.Context, e *benchEnv, sc *Scenario) error      { return nil }
func runGoBench(ctx context.Context, e *benchEnv) string                  { return "" }
func isChild() bool                                                      { return false }
func runChild(args []string) int                                         { return 0 }
