/**
 * `dumplings` tables line up in a terminal whatever the keys are written in
 * (issue 23): column widths are display widths, so CJK and emoji (two
 * columns each), combining marks (none) and plain ASCII keys share one grid.
 */
import stringWidth from "string-width";
import { describe, expect, it } from "vitest";
import { displayWidth, renderTable } from "../../src/cli/table.js";

describe("renderTable by display width", () => {
  it("counts CJK and emoji as two columns and combining marks as none", () => {
    expect(displayWidth("abc")).toBe(3);
    expect(displayWidth("東京")).toBe(4);
    expect(displayWidth("🥟")).toBe(2);
    expect(displayWidth("👩‍👩‍👧")).toBe(2); // one grapheme of five code points
    expect(displayWidth("e\u0301")).toBe(1);
  });

  it("aligns every column across CJK, emoji and ASCII keys", () => {
    const keys = ["plain", "東京-セッション", "🥟dumpling🥟", "👩‍👩‍👧-family", "café"];
    const table = renderTable(
      [{ header: "key" }, { header: "messages", align: "right" }, { header: "name" }],
      keys.map((k, i) => [k, String(i * 100), `n${i}`]),
    );
    const lines = table.split("\n");
    expect(lines).toHaveLength(2 + keys.length);
    // the second column ends, and the third begins, at the same display column on every line
    const header = lines[0] as string;
    const nameColumn = stringWidth(header.slice(0, header.indexOf("name")));
    for (const line of lines.slice(2)) {
      const at = line.lastIndexOf(" n") + 1;
      expect(stringWidth(line.slice(0, at))).toBe(nameColumn);
    }
    // the rule is as wide as the widest key, in columns
    const rule = (lines[1] as string).split("  ")[0] as string;
    expect(rule.length).toBe(Math.max(...keys.map((k) => stringWidth(k)), 3));
    expect(rule.length).toBe(stringWidth("東京-セッション"));
  });
});
