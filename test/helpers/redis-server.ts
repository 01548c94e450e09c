/**
 * A private `redis-server` for tests that stop Redis mid-run: started on a
 * free port with no persistence, killed with SIGKILL by the test.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import net from "node:net";

/** Path of the redis-server binary, or undefined when it is not installed. */
export function redisServerBinary(): string | undefined {
  try {
    return execFileSync("sh", ["-c", "command -v redis-server"], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host: "127.0.0.1", port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

/** A running private redis-server. */
export interface PrivateRedis {
  port: number;
  url: string;
  process: ChildProcess;
  /** SIGKILLs the server and waits until it has exited. */
  kill(): Promise<void>;
}

/**
 * Starts `redis-server --port N --save "" --appendonly no` and waits until it accepts connections.
 * @param port - port to use (default: a free one)
 * @param args - more configuration, e.g. `["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"]`
 */
export async function startRedis(port?: number, args: readonly string[] = []): Promise<PrivateRedis> {
  const p = port ?? (await freePort());
  const child = spawn(
    "redis-server",
    ["--port", String(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", ...args],
    {
      stdio: "ignore",
    },
  );
  for (let i = 0; i < 100 && !(await canConnect(p)); i++) await new Promise((r) => setTimeout(r, 50));
  if (!(await canConnect(p))) {
    child.kill("SIGKILL");
    throw new Error(`redis-server did not start on port ${p}`);
  }
  return {
    port: p,
    url: `redis://127.0.0.1:${p}`,
    process: child,
    kill: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGKILL");
      }),
  };
}
