/**
 * Parent side of the PostgreSQL driver tests: child processes that run the
 * library from source (`node --import tsx`, as the kill harnesses do) and
 * talk over stdin/stdout (see test/fixtures/drivers/child-io.ts), unique
 * names, an admin pool, and a TCP proxy that can be stopped and started.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import net from "node:net";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { DATABASE_URL } from "../helpers/services.js";

/** Project root (children run with it as cwd, so that `--import tsx` resolves). */
export const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** Absolute path of a fixture script of test/fixtures/drivers/. */
export const fixture = (name: string) => fileURLToPath(new URL(`../fixtures/drivers/${name}`, import.meta.url));

/** A lower-case name no other run uses: `<prefix>_<pid>_<random>`. */
export const uniqueName = (prefix: string) => `${prefix}_${process.pid}_${randomBytes(4).toString("hex")}`;

/** `DATABASE_URL` with another database name. */
export function databaseUrl(database: string): string {
  const u = new URL(DATABASE_URL);
  u.pathname = `/${database}`;
  return u.toString();
}

/** An admin pool on `DATABASE_URL` (or `url`) with its errors handled. */
export function adminPool(url = DATABASE_URL): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on("error", () => {});
  return pool;
}

/** How a child ended. */
export interface ChildResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** The JSON of its `RESULT …` line, when it printed one. */
  result: Record<string, unknown> | undefined;
}

/** A running child. */
export interface Child {
  readonly process: ChildProcess;
  /** Resolves with the first stdout line equal to `line` (rejects when the child ends first or after `timeoutMs`). */
  waitForLine(line: string, timeoutMs?: number): Promise<void>;
  /** Writes a command line to the child's stdin. */
  send(command: string): void;
  /** The child's end (it is SIGKILLed when it outlives `killAfterMs`). */
  readonly done: Promise<ChildResult>;
}

/**
 * Starts `node --import tsx <fixture> <args>` in the project root.
 *
 * @param script - absolute path of the script
 * @param args - its arguments
 * @param options - extra `env`, and `killAfterMs`: a bound on its whole life (default 60 s)
 */
export function startChild(
  script: string,
  args: string[] = [],
  options: { env?: Record<string, string>; killAfterMs?: number } = {},
): Child {
  const child = spawn(process.execPath, ["--import", "tsx", script, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...options.env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  let partial = "";
  const seen: string[] = [];
  const lineWaiters = new Set<{ line: string; resolve: () => void }>();
  child.stdout!.on("data", (d: Buffer) => {
    stdout += d.toString();
    partial += d.toString();
    const lines = partial.split("\n");
    partial = lines.pop() ?? "";
    for (const line of lines) {
      seen.push(line);
      for (const w of lineWaiters) {
        if (w.line === line) {
          lineWaiters.delete(w);
          w.resolve();
        }
      }
    }
  });
  child.stderr!.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  child.stdin!.on("error", () => {}); // a child that died before reading its commands
  const killer = setTimeout(() => child.kill("SIGKILL"), options.killAfterMs ?? 60_000);
  const done = new Promise<ChildResult>((resolve) => {
    child.on("close", (code, signal) => {
      clearTimeout(killer);
      const line = stdout
        .split("\n")
        .reverse()
        .find((l) => l.startsWith("RESULT "));
      let result: Record<string, unknown> | undefined;
      try {
        result = line ? (JSON.parse(line.slice("RESULT ".length)) as Record<string, unknown>) : undefined;
      } catch {
        result = undefined;
      }
      resolve({ code, signal, stdout, stderr, result });
    });
  });
  return {
    process: child,
    done,
    send(command) {
      if (child.stdin!.writable) child.stdin!.write(`${command}\n`);
    },
    waitForLine(line, timeoutMs = 30_000) {
      if (seen.includes(line)) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const waiter = {
          line,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        };
        const timer = setTimeout(() => {
          lineWaiters.delete(waiter);
          reject(new Error(`child did not print ${JSON.stringify(line)} within ${timeoutMs} ms\n${stderr}`));
        }, timeoutMs);
        lineWaiters.add(waiter);
        void done.then((r) => {
          if (!lineWaiters.has(waiter)) return;
          lineWaiters.delete(waiter);
          clearTimeout(timer);
          reject(
            new Error(
              `child ended (code ${r.code}, signal ${r.signal}) before printing ${JSON.stringify(line)}\n${r.stderr}`,
            ),
          );
        });
      });
    },
  };
}

/** A one-paragraph account of a child's end, for assertion messages. */
export function explain(r: ChildResult): string {
  // The head of stderr says what killed the child (pg's errors then dump whole client objects).
  const head = (s: string) => (s.length > 1500 ? `${s.slice(0, 1500)}…` : s);
  const tail = (s: string) => (s.length > 1500 ? `…${s.slice(-1500)}` : s);
  return `exit code ${r.code}, signal ${r.signal}\n--- stdout\n${tail(r.stdout)}\n--- stderr\n${head(r.stderr)}`;
}

/**
 * A TCP proxy on 127.0.0.1:`port` to a PostgreSQL server on 127.0.0.1, that
 * the test stops (nothing listens: connections are refused, open ones are
 * cut) and starts again on the same port.
 */
export class TcpProxy {
  private server: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();

  private constructor(
    /** The port the proxy listens on when started. */
    readonly port: number,
    private readonly target: { host: string; port: number },
  ) {}

  /**
   * A stopped proxy on a free port, forwarding to the port of `DATABASE_URL`
   * on 127.0.0.1.
   */
  static async create(): Promise<TcpProxy> {
    const probe = net.createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    return new TcpProxy(port, { host: "127.0.0.1", port: Number(new URL(DATABASE_URL).port || 5432) });
  }

  /** `DATABASE_URL` through the proxy, with extra query parameters. */
  url(params: Record<string, string> = {}): string {
    const u = new URL(DATABASE_URL);
    u.hostname = "127.0.0.1";
    u.port = String(this.port);
    for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
    return u.toString();
  }

  /** Starts listening (forwarding every connection). */
  async start(): Promise<void> {
    if (this.server) return;
    const server = net.createServer((client) => {
      const upstream = net.connect(this.target);
      this.sockets.add(client);
      this.sockets.add(upstream);
      const cut = () => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      client.on("error", cut).on("close", cut);
      upstream.on("error", cut).on("close", cut);
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.port, "127.0.0.1", () => resolve());
    });
    this.server = server;
  }

  /** Stops listening and cuts every open connection. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
