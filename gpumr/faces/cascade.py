"""Haar cascades as flat arrays, read from OpenCV's XML."""

import numpy as np

from ..errors import GpumrError

THRESHOLD_EPS = np.float32(1e-5)


class Cascade:
    """A boosted Haar cascade of small trees (stumps included) as flat arrays.

    Attributes
    ----------
    window : (int, int)
        Width and height of the detection window.
    stages : ndarray int32 [n_stages, 2]
        First tree and tree count.
    stage_thresholds : ndarray float32 [n_stages]
        Stage thresholds, less OpenCV's 1e-5.
    trees : ndarray int32 [n_trees, 2]
        First node and first leaf of each tree.
    nodes : ndarray int32 [n_nodes, 3]
        Feature, left child, right child.
    node_thresholds : ndarray float32 [n_nodes]
    leaves : ndarray float32 [n_leaves]
    rects : ndarray int32 [n_features, 3, 4]
        x, y, w, h of up to three rectangles (unused ones are zero).
    weights : ndarray float32 [n_features, 3]"""

    def __init__(self, path):
        import cv2
        fs = cv2.FileStorage(path, cv2.FILE_STORAGE_READ)
        try:
            root = fs.getNode("cascade")
            if root.empty():
                raise GpumrError(f"{path}: not a cascade in OpenCV's current format (old-format "
                                 "haarcascade XML is not supported by the GPU path)")
            if root.getNode("stageType").string() != "BOOST" or root.getNode("featureType").string() != "HAAR":
                raise GpumrError(f"{path}: only BOOST stages of HAAR features run on the GPU")
            self.window = (int(root.getNode("width").real()), int(root.getNode("height").real()))
            stages, thresholds, trees, nodes, node_thr, leaves = [], [], [], [], [], []
            sn = root.getNode("stages")
            for i in range(sn.size()):
                st = sn.at(i)
                weak = st.getNode("weakClassifiers")
                stages.append((len(trees), weak.size()))
                thresholds.append(np.float32(st.getNode("stageThreshold").real()) - THRESHOLD_EPS)
                for j in range(weak.size()):
                    w = weak.at(j)
                    internal = _numbers(w.getNode("internalNodes"))
                    tree_leaves = _numbers(w.getNode("leafValues"))
                    if not internal or len(internal) % 4:
                        raise GpumrError(f"{path}: stage {i}, tree {j}: categorical or malformed nodes "
                                         "(only HAAR threshold nodes are supported)")
                    trees.append((len(nodes), len(leaves)))
                    for left, right, feature, thr in zip(*[iter(internal)] * 4):
                        nodes.append((int(feature), int(left), int(right)))
                        node_thr.append(thr)
                    leaves += tree_leaves
            fn = root.getNode("features")
            rects = np.zeros((fn.size(), 3, 4), np.int32)
            weights = np.zeros((fn.size(), 3), np.float32)
            for i in range(fn.size()):
                f = fn.at(i)
                if not f.getNode("tilted").empty() and int(f.getNode("tilted").real()):
                    raise GpumrError(f"{path}: feature {i} is tilted; tilted Haar features are not supported "
                                     "on the GPU (the CPU path handles them)")
                rn = f.getNode("rects")
                if not 1 <= rn.size() <= 3:
                    raise GpumrError(f"{path}: feature {i} has {rn.size()} rectangles")
                for r in range(rn.size()):
                    x, y, w_, h, wt = _numbers(rn.at(r))
                    rects[i, r] = (x, y, w_, h)
                    weights[i, r] = wt
        finally:
            fs.release()
        self.stages = np.array(stages, np.int32)
        self.stage_thresholds = np.array(thresholds, np.float32)
        self.trees = np.array(trees, np.int32)
        self.nodes = np.array(nodes, np.int32).reshape(-1, 3)
        self.node_thresholds = np.array(node_thr, np.float32)
        self.leaves = np.array(leaves, np.float32)
        self.rects = rects
        self.weights = weights
        if len(self.nodes) and (self.nodes[:, 0].max() >= len(rects) or self.nodes[:, 0].min() < 0):
            raise GpumrError(f"{path}: a node refers to a feature that does not exist")

    def packed(self, layout):
        """The cascade as ``cuda/haar.cu``'s stage kernels read it: ``(stages, nodes)``, int32 [n, 4] each. Raises
        ``GpumrError`` if a tree or the feature count is too large for those fields.

        Parameters
        ----------
        layout : dict
            The bit positions above, as ``cuda/haar.cu`` defines them (:func:`gpumr.gpu.kernels.defines`)."""
        size_bit, feature_bit = layout["NODE_SIZE_BIT"], layout["NODE_FEATURE_BIT"]
        n_nodes = len(self.nodes)
        starts = self.trees[:, 0].astype(np.int64)
        sizes = np.diff(np.append(starts, n_nodes))
        if len(sizes) and sizes.max() >= 1 << (feature_bit - size_bit):
            raise GpumrError(f"a tree of {sizes.max()} nodes: the GPU path takes trees of at most "
                             f"{(1 << (feature_bit - size_bit)) - 1}")
        if len(self.rects) >= 1 << (31 - feature_bit):
            raise GpumrError(f"{len(self.rects)} features: the GPU path takes at most {(1 << (31 - feature_bit)) - 1}")
        tree = np.repeat(np.arange(len(starts)), sizes)  # each node's tree
        first_leaf = self.trees[tree, 1].astype(np.int64)
        nodes = np.zeros((n_nodes, 4), np.int32)
        nodes[:, 0] = self.node_thresholds.view(np.int32)
        meta = (sizes[tree] << size_bit) | (self.nodes[:, 0].astype(np.int64) << feature_bit)
        for col, bit in ((1, layout["NODE_LEFT_BIT"]), (2, layout["NODE_RIGHT_BIT"])):
            child = self.nodes[:, col].astype(np.int64)
            is_node = child > 0
            meta |= is_node.astype(np.int64) << bit
            where = np.where(is_node, 0, first_leaf - child)
            if np.any(where >= len(self.leaves)) or np.any(is_node & (child >= sizes[tree])):
                raise GpumrError("a node's child is neither a node of its tree nor one of its leaves")
            leaf = self.leaves[where] if len(self.leaves) else np.zeros(n_nodes, np.float32)
            nodes[:, 1 + col] = np.where(is_node, child, leaf.view(np.int32))
        nodes[:, 1] = meta.astype(np.int32)
        bounds = np.append(starts, n_nodes)
        stages = np.zeros((len(self.stages), 4), np.int32)
        first_tree = self.stages[:, 0].astype(np.int64)
        stages[:, 0] = bounds[first_tree]
        stages[:, 1] = bounds[first_tree + self.stages[:, 1]]
        stages[:, 2] = self.stage_thresholds.view(np.int32)
        return stages, nodes

    def arrays(self):
        """The arrays in the order the reference scan and the GPU kernel take them."""
        return (self.stages, self.stage_thresholds, self.trees, self.nodes, self.node_thresholds, self.leaves,
                self.rects, self.weights)


def _numbers(node):
    """The numbers of an XML sequence node, or of a text node of numbers."""
    if node.isSeq():
        return [node.at(i).real() for i in range(node.size())]
    return [float(t) for t in node.string().split()]
