/**
 * A tool's parameter schema, whatever the user wrote it with: zod 3, zod 4
 * (any copy, not only ours), another Standard Schema library, a plain JSON
 * Schema object, or an AI SDK schema (`jsonSchema(…)`, `zodSchema(…)`, a lazy
 * schema, the `inputSchema` of `tool()`), turned into the AI SDK's own
 * `Schema` through its `asSchema`. Nothing here tests `instanceof` against a
 * particular zod: a schema is recognised by its shape.
 *
 * @module
 */
import { asSchema, jsonSchema, type Schema, zodSchema } from "ai";

/** The AI SDK marks its schemas with this registered symbol (`@ai-sdk/provider-utils`' `isSchema`). */
const AI_SDK_SCHEMA = Symbol.for("vercel.ai.schema");

/** The JSON Schema of a tool without parameters. */
const EMPTY_OBJECT = { type: "object", properties: {} } as const;

/**
 * Normalises any tool schema a user has into the AI SDK's `Schema`.
 *
 * @param schema - zod 3 or 4, a Standard Schema, a JSON Schema object, an AI SDK schema, or
 *   `undefined` (no parameters)
 * @returns the AI SDK schema: its `jsonSchema` is what the model is sent; its `validate`
 *   (absent for a plain JSON Schema) checks a call's arguments
 * @throws {TypeError} when `schema` is neither an object nor a function
 * @example
 * toToolSchema(z3.object({ city: z3.string() })).jsonSchema // { type: "object", properties: { city: … } … }
 */
// biome-ignore lint/suspicious/noExplicitAny: a schema of any type
export function toToolSchema(schema: unknown): Schema<any> {
  if (schema === undefined || schema === null) return jsonSchema(EMPTY_OBJECT);
  // a lazy AI SDK schema (`lazySchema(() => …)`)
  if (typeof schema === "function") return asSchema(schema as Parameters<typeof asSchema>[0]);
  if (typeof schema !== "object") throw new TypeError(`a tool schema must be an object, got ${typeof schema}`);
  const s = schema as Record<PropertyKey, unknown>;
  // AI SDK schemas and Standard Schemas (zod ≥ 3.24, zod 4, valibot, arktype…): the AI SDK's own conversion
  if (s[AI_SDK_SCHEMA] === true || "~standard" in s) return asSchema(schema as Parameters<typeof asSchema>[0]);
  // zod 3 before 3.24 (no Standard Schema interface): recognised by its shape
  if (typeof s.safeParse === "function" && typeof s._def === "object" && s._def !== null) {
    return zodSchema(schema as Parameters<typeof zodSchema>[0]);
  }
  // a plain JSON Schema object
  return jsonSchema(schema as Parameters<typeof jsonSchema>[0]);
}

/**
 * Describes why a schema's `validate` refused a value: `path: message` per issue
 * (zod and Standard Schema issues), else the error's message.
 *
 * @param error - the `error` of a failed `validate` result
 * @returns one line
 */
export function schemaProblem(error: unknown): string {
  const issues = issuesOf(error) ?? issuesOf((error as { cause?: unknown } | null)?.cause);
  if (issues && issues.length > 0) {
    return issues
      .map((i) => {
        const path = (i.path ?? [])
          .map((p) => (typeof p === "object" && p !== null && "key" in p ? (p as { key: unknown }).key : p))
          .map(String)
          .join(".");
        return `${path || "(root)"}: ${i.message}`;
      })
      .join("; ");
  }
  return error instanceof Error ? error.message : String(error);
}

function issuesOf(error: unknown): Array<{ path?: readonly unknown[]; message: string }> | undefined {
  const issues = (error as { issues?: unknown } | null)?.issues;
  return Array.isArray(issues) ? (issues as Array<{ path?: readonly unknown[]; message: string }>) : undefined;
}
