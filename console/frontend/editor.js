// The harness file editor: CodeMirror 6 over the page's <textarea>, bundled by `npm run build`
// (esbuild) into static_build/editor.js. Without JavaScript the textarea still works as a plain form.
//
// The textarea stays the form field: every change is copied into it and announced with an `input`
// event, so the htmx validation request (hx-include="#editor") and the Save button send what is in
// the editor. Markers come from the server's validation (a json_script block inside #validation,
// swapped in by htmx): the server names the line, counted from the top of the file.
import { basicSetup, EditorView } from "codemirror";
import { EditorState } from "@codemirror/state";
import { keymap } from "@codemirror/view";
import { json } from "@codemirror/lang-json";
import { markdown } from "@codemirror/lang-markdown";
import { yaml, yamlFrontmatter } from "@codemirror/lang-yaml";
import { lintGutter, setDiagnostics } from "@codemirror/lint";

function language(name) {
  if (name === "json") return json();
  if (name === "yaml") return yaml();
  return yamlFrontmatter({ content: markdown() }); // SKILL.md and prompt blocks: YAML front matter, Markdown body
}

function readJson(id, fallback) {
  const node = document.getElementById(id);
  return node ? JSON.parse(node.textContent) : fallback;
}

function mount(textarea) {
  const form = textarea.form;
  const path = textarea.dataset.path;
  const saved = readJson(textarea.dataset.saved, textarea.value);
  const status = document.getElementById(textarea.dataset.status);
  const host = document.createElement("div");
  host.className = "code-editor";
  textarea.before(host);
  textarea.hidden = true;

  let leaving = false; // a save, or a navigation the operator confirmed, is under way
  const view = new EditorView({
    parent: host,
    state: EditorState.create({
      doc: textarea.value,
      extensions: [
        basicSetup,
        language(textarea.dataset.language),
        lintGutter(),
        EditorView.lineWrapping, // skill rules are long lines; numbers still count lines of the file
        keymap.of([{ key: "Mod-s", preventDefault: true, run: () => { form.requestSubmit(); return true; } }]),
        EditorView.contentAttributes.of({ "aria-label": "Contents of " + path }),
        EditorView.updateListener.of((update) => {
          if (!update.docChanged) return;
          textarea.value = update.state.doc.toString();
          textarea.dispatchEvent(new Event("input", { bubbles: true }));
          showDirty();
        }),
      ],
    }),
  });

  const dirty = () => view.state.doc.toString() !== saved;
  function showDirty() {
    const unsaved = dirty();
    host.dataset.dirty = unsaved ? "1" : "0";
    if (status) status.textContent = unsaved ? "● unsaved changes" : "";
  }

  function applyMarkers() {
    const doc = view.state.doc;
    const lines = [];
    const diagnostics = readJson("editor-markers", []).map((marker) => {
      const line = doc.line(Math.min(Math.max(1, marker.line), doc.lines));
      lines.push(line.number);
      return { from: line.from, to: line.to, severity: "error", message: marker.message };
    });
    view.dispatch(setDiagnostics(view.state, diagnostics));
    host.dataset.markedLines = lines.join(",");
  }

  function goToLine(number) {
    const line = view.state.doc.line(Math.min(Math.max(1, number), view.state.doc.lines));
    view.dispatch({ selection: { anchor: line.from }, scrollIntoView: true });
    view.focus();
  }

  const question = () => path + " has unsaved changes. Leave without saving them?";
  form.addEventListener("submit", () => { leaving = true; }); // the text goes with the form
  // Links and other forms on the page (another file, commit, add or remove a module) would drop the text.
  document.addEventListener("click", (event) => {
    const item = event.target.closest("#errors li[data-line]");
    if (item) { goToLine(Number(item.dataset.line)); return; }
    const link = event.target.closest("a[href]");
    if (!link || event.defaultPrevented || !dirty() || link.target === "_blank") return;
    if (link.getAttribute("href").startsWith("#")) return;
    if (window.confirm(question())) leaving = true;
    else event.preventDefault();
  });
  document.addEventListener("submit", (event) => {
    if (event.target === form || !dirty()) return;
    if (window.confirm(question())) leaving = true;
    else event.preventDefault();
  }, true);
  // Anything else (closing the tab, typing a URL, the back button): the browser's own prompt.
  window.addEventListener("beforeunload", (event) => {
    if (leaving || !dirty()) return;
    event.preventDefault();
    event.returnValue = "";
  });
  document.body.addEventListener("htmx:afterSettle", (event) => {
    if (event.detail.target && event.detail.target.id === "validation") applyMarkers();
  });

  applyMarkers();
  showDirty();
  host.dataset.ready = "1";
  return view;
}

document.querySelectorAll("textarea[data-code-editor]").forEach(mount);
