import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // The tests' PostgreSQL database (the development and CI servers have a `test` database). The library's
    // own default, without DATABASE_URL, is the server's `postgres` database: tests never rely on it.
    env: { DATABASE_URL: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test" },
  },
});
