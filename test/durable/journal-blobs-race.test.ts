/**
 * PostgreSQL: a step write sharing a blob with a run deleted at the same instant never loses it (two
 * journals, two pools, one schema): the write locks the stored blob (`FOR KEY SHARE`) or writes it again
 * when the delete, holding `FOR UPDATE`, committed first; the delete counts the blob's references after
 * its lock, so it sees a write that committed meanwhile.
 */
import { createHash, randomUUID } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const schema = `djb_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
const writer = new PostgresJournal({ url: DATABASE_URL, schema });
const deleter = new PostgresJournal({ url: DATABASE_URL, schema });

afterAll(async () => {
  await writer.dropSchema().catch(() => undefined);
  await writer.close();
  await deleter.close();
});

describe.skipIf(await postgresSkipReason())("PostgresJournal blobs under concurrency", () => {
  it("a step write racing the deletion of another run that shares its blob never loses it", async () => {
    const bytes = new Uint8Array(Buffer.from(`shared ${randomUUID()} `.repeat(2000), "utf8"));
    const ref = createHash("sha256").update(bytes).digest("hex");
    const blobs = new Map([[ref, bytes]]);
    const step = (runId: string, token: number) => ({
      runId,
      seq: 0,
      name: "checkpoint:0",
      inputHash: "h",
      status: "completed" as const,
      output: { ref },
      attempt: 1,
      startedAt: 1,
      finishedAt: 2,
      fencingToken: token,
    });
    const leased = async (j: PostgresJournal, runId: string) => {
      await j.createRun({ runId, workflow: "graph", input: null });
      const l = await j.acquireLease(runId, "w", 60_000);
      if (!l.acquired) throw new Error("lease");
      return l.fencingToken;
    };
    let keepToken = await leased(writer, "keep");
    for (let round = 0; round < 15; round++) {
      const gone = `gone-${round}`;
      const goneToken = await leased(deleter, gone);
      await deleter.writeStep(goneToken, step(gone, goneToken), { blobs, blobRefs: [ref] });
      // keep drops its reference, so the blob's fate depends on who commits first
      await writer.resetRun("keep", -1, "test");
      keepToken = ((await writer.acquireLease("keep", "w", 60_000)) as { fencingToken: number }).fencingToken;
      await Promise.all([
        writer.writeStep(keepToken, step("keep", keepToken), { blobs, blobRefs: [ref] }),
        deleter.deleteRun(gone),
      ]);
      expect(await writer.readBlob(ref), `round ${round}`).toEqual(bytes);
      expect((await writer.readSteps("keep")).map((s) => s.output)).toEqual([{ ref }]);
    }
    // the last reference gone, the blob goes
    await writer.deleteRun("keep");
    expect(await writer.readBlob(ref)).toBeUndefined();
  });
});
